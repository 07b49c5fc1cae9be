// Block-quantized weight rows seen as 32-value slices, the unit the integer dot products of
// kernels/stored_matmul work on. Every block format the stored kernels take reads as
//   weight[i] = scale[i / 4] * q[i] + offset      for i in 0..31 of a slice,
// with q a small integer: one slice per block for Q8_0/Q4_0/Q4_1 (32 values), eight per
// 256-value K-quant super-block (Q4_K/Q5_K: a 6-bit scale and min per slice; Q6_K: two int8
// scales per slice, one per 16 values, hence a scale per 4-value lane).
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace tq {

struct WeightSlice {
  int8_t q[32];    // Q8_0 -128..127, Q4_0 -8..7, Q4_1/Q4_K 0..15, Q5_K 0..31, Q6_K -32..31
  float scale[8];  // per 4-value lane; each is one fp32 product as the dequantizer forms it
  float offset;    // added to every value: Q4_1's m, minus dmin·min for Q4_K/Q5_K, else 0
};

// A 256-value K-quant super-block with its integer scales apart, as the K-quant products use them:
//   weight[i] = d · scale[i / 16] · q[i] − dmin · min[i / 32].
struct KQuantSuperblock {
  int8_t q[256];      // Q4_K 0..15, Q5_K 0..31, Q6_K -32..31
  int16_t scale[16];  // per 16 values: Q4_K/Q5_K 0..63 (one per slice, twice), Q6_K -128..127
  int16_t min[8];     // per 32 values: Q4_K/Q5_K 0..63, Q6_K 0
  float d;            // fp32 of the block's fp16 d
  float dmin;         // fp32 of its fp16 dmin (Q6_K: 0)
};

// True for Q4_K, Q5_K and Q6_K.
bool is_k_quant(DType type);

// Super-block `index` (0-based, counted from the row start) of a row stored as a K-quant.
void unpack_k_quant_superblock(DType type, const uint8_t* row, int64_t index, KQuantSuperblock* out);

// True for the block types unpack_weight_slice() reads.
bool has_weight_slices(DType type);

// Slice `slice` (0-based, counted from the row start) of a row stored as `type`.
void unpack_weight_slice(DType type, const uint8_t* row, int64_t slice, WeightSlice* out);

}  // namespace tq
