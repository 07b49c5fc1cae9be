// The AVX-512 kernels behind linear_stored() (kernels/stored_matmul.h). Their file is compiled
// with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mfma -mf16c; call them only when
// stored_matmul_avx512_available() says the CPU has all of these.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace tq {

struct ActivationBlock;
struct SuperblockActivation;

bool stored_matmul_avx512_available();
// quantize_superblock_activations() (kernels/stored_matmul.h), bit for bit; false (blocks
// unspecified) when x holds an infinity or NaN.
bool quantize_superblock_activations_avx512(const float* x, int64_t n_elems, SuperblockActivation* blocks);

// -128 · (the sum of values 4k..4k+3) of each block, k = 0..7: what Q8_0's kernel starts each
// lane's dpbusd from. act: [n_blocks] → sums: [n_blocks, 8].
void activation_group_sums(const ActivationBlock* act, int64_t n_blocks, int32_t* sums);

// Q4_1 or Q8_0 rows interleaved 16 at a time (kernels/interleaved_rows.h): groups [g_begin, g_end)
// of one product, bit-identical to linear_stored_reference on the same rows as stored (the integer
// dot of each 4 values is exact whether maddubs+madd, the sign trick or VNNI's dpbusd forms it).
// act: [n, n_slices]; act_sums: activation_group_sums of act (Q8_0; ignored for Q4_1);
// w: `out` interleaved rows; y: [n, out].
void linear_interleaved16_avx512_groups(DType weight_type, const ActivationBlock* act, const int32_t* act_sums,
                                        int64_t n, int64_t n_slices, const uint8_t* w, int64_t out, const float* bias,
                                        float* y, int64_t g_begin, int64_t g_end);

// Q4_K or Q6_K rows interleaved 16 at a time: groups [g_begin, g_end) of one product, bit-identical
// to linear_stored_reference (the exact int32 sums of a super-block are the same in any order).
// act: [n, n_super] (quantize_superblock_activations); w: `out` interleaved rows; y: [n, out].
void linear_interleaved16_k_avx512_groups(DType weight_type, const SuperblockActivation* act, int64_t n,
                                          int64_t n_super, const uint8_t* w, int64_t out, const float* bias, float* y,
                                          int64_t g_begin, int64_t g_end);

}  // namespace tq
