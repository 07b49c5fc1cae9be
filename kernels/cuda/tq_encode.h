// Coding K or V rows as 4-bit TurboQuant rows on the GPU, bit for bit as the CPU codes them
// (quant/tq_row.cpp's tq_encode_row through kv/kv_row_codec.h's encode, dense rotation): the same
// operations in the same order, each rounded alike (the row norm and the least-squares sums in
// double, one element at a time; the rotation's eight fp32 partial sums per output, no fused
// operations), so a row stored by the GPU reads back exactly as the CPU's would. It always runs
// the three least-squares rounds, which the CPU stops early once a round changes no index: the
// rounds it skips change nothing, so the rows agree.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/paged_attention.h"

namespace tq::cuda {

enum class Tq4ScaleRule { Norm, NormCorrected, LeastSquares };  // quant/tq_row.h's TqScaleMode

// One layer side's coding, device pointers. What it does not cover (the caller keeps such sides on
// the CPU's terms or refuses them): per-channel key scales (--tq-keys smoothed), the Hadamard
// rotation (the CPU's fast transform rounds differently from a dense product), split and
// channel-bit rows, and the window copies of sink and recent rows.
struct Tq4Coding {
  const float* rotation = nullptr;    // [d, d] row-major R (a dense rotation)
  const float* boundaries = nullptr;  // [15] ascending decision boundaries
  const float* levels = nullptr;      // [16] the codebook's centroids
  const float* center = nullptr;      // [n_kv_heads, d] subtracted before coding, or null
  Tq4ScaleRule rule = Tq4ScaleRule::LeastSquares;
};

// x: [n, n_kv_heads, head_dim] fp32 → the rows of token t at its slot (positions[t] through its
// block table) of one layer's pages. head_dim even, at most kMaxHeadDim.
void store_tq4_rows(const Tq4PageShape& shape, const Tq4Coding& coding, const TokenSlots& slots, const float* x,
                    uint8_t* pages, cudaStream_t stream);

}  // namespace tq::cuda
