// The AMX (Advanced Matrix Extensions, TMUL int8) kernel behind linear_stored() for Q4_K and Q6_K
// rows interleaved 16 at a time. Its file is compiled with -mamx-tile -mamx-int8 and the AVX-512
// flags; call it only when stored_matmul_amx_available() is true.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace tq {

struct ActivationBlock;

// True when the CPU has AMX-TILE, AMX-INT8 and the AVX-512 kernels, the kernel granted this process
// the tile state (Linux's arch_prctl(ARCH_REQ_XCOMP_PERM)), and TQSERVE_AMX is not "0" (for A/B
// measurements of the AVX-512 kernel on the same machine). Decided once per process.
bool stored_matmul_amx_available();

// Tokens one tile multiply covers: the kernel takes tokens in whole blocks of this many.
constexpr int64_t kAmxTokens = 16;

// One slice (32 values) of kAmxTokens tokens' activations as a tile loads them: the values of token
// t in row t (contiguous, so one load reads 8 cache lines, not 16 tokens' scattered blocks), their
// scales d and s (d times the sum of its values, as ggml's Q8_1 keeps it) beside them.
struct alignas(64) AmxActivationSlice {
  int8_t qs[kAmxTokens][32];
  float d[kAmxTokens];
  float s[kAmxTokens];
};

// act: [n_tokens, n_slices], n_tokens a multiple of kAmxTokens → packed: [n_tokens / kAmxTokens, n_slices].
// Splits the blocks among the threads.
void pack_activations_for_amx(const ActivationBlock* act, int64_t n_tokens, int64_t n_slices,
                              AmxActivationSlice* packed);

// Q4_K or Q6_K rows interleaved 16 at a time (kernels/interleaved_rows.h): groups [g_begin, g_end)
// of one product, bit-identical to linear_stored_reference and to linear_interleaved16_avx512_groups.
// The first n_tiled tokens (a multiple of kAmxTokens) go through tiles: a tile multiply forms each
// slice's (Q6_K: each half slice's) integer dot exactly, as VNNI's dpbusd chain does, and the fp32
// arithmetic after it is the VNNI kernel's, operation for operation. The n_tail tokens after them go
// through linear_interleaved16_avx512_groups one group at a time, right after that group's tiles, so
// the weights are read from memory once.
// packed: pack_activations_for_amx of the tiled tokens; tail_act: [n_tail, n_slices] and tail_sums
// their activation_group_sums (Q6_K; may be null for Q4_K); w: `out` interleaved rows;
// y: [n_tiled + n_tail, out].
void linear_interleaved16_amx_groups(DType weight_type, const AmxActivationSlice* packed, int64_t n_tiled,
                                     const ActivationBlock* tail_act, const int32_t* tail_sums, int64_t n_tail,
                                     int64_t n_slices, const uint8_t* w, int64_t out, const float* bias, float* y,
                                     int64_t g_begin, int64_t g_end);

}  // namespace tq
