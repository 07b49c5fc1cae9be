// The AMX (Advanced Matrix Extensions, TMUL int8) kernel behind linear_stored() for Q4_K and Q6_K
// rows interleaved 16 at a time. Its file is compiled with -mamx-tile -mamx-int8 and the AVX-512
// flags; call it only when stored_matmul_amx_available() is true.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace tq {

struct SuperblockActivation;

// True when the CPU has AMX-TILE, AMX-INT8 and the AVX-512 kernels, the kernel granted this process
// the tile state (Linux's arch_prctl(ARCH_REQ_XCOMP_PERM)), and TQSERVE_AMX is not "0" (for A/B
// measurements of the AVX-512 kernel on the same machine). Decided once per process.
bool stored_matmul_amx_available();

// Tokens one tile multiply covers: the kernel takes tokens in whole blocks of this many.
constexpr int64_t kAmxTokens = 16;

// One super-block (256 values) of kAmxTokens tokens' activations as the tiles load them: qs[k] the
// values 64k..64k+63 of token t in row t (one tile load reads 16 cache lines of one tile), the
// tokens' scales d, and per token its slices' activation sums in pairs (slice 2p in the low 16 bits,
// 2p + 1 in the high: what VPDPWSSD multiplies by the weights' minima).
struct alignas(64) AmxActivationSuperblock {
  int8_t qs[4][kAmxTokens][64];
  float d[kAmxTokens];
  int32_t sum_pairs[kAmxTokens][4];
};

// act: [n_tokens, n_super], n_tokens a multiple of kAmxTokens → packed: [n_tokens / kAmxTokens, n_super].
// Splits the blocks among the threads.
void pack_superblock_activations_for_amx(const SuperblockActivation* act, int64_t n_tokens, int64_t n_super,
                                         AmxActivationSuperblock* packed);

// Q4_K or Q6_K rows interleaved 16 at a time (kernels/interleaved_rows.h): groups [g_begin, g_end)
// of one product, bit-identical to linear_stored_reference and to linear_interleaved16_k_avx512_groups.
// The first n_tiled tokens (a multiple of kAmxTokens) go through tiles: the tiles form each
// super-block's integer sum exactly, as VNNI's dpbusd and multiplies by the scales do, and the fp32
// arithmetic after it is the VNNI kernel's, operation for operation. The n_tail tokens after them go
// through linear_interleaved16_k_avx512_groups one group at a time, right after that group's tiles,
// so the weights are read from memory once.
// packed: pack_superblock_activations_for_amx of the tiled tokens; tail_act: [n_tail, n_super];
// w: `out` interleaved rows; y: [n_tiled + n_tail, out].
void linear_interleaved16_amx_groups(DType weight_type, const AmxActivationSuperblock* packed, int64_t n_tiled,
                                     const SuperblockActivation* tail_act, int64_t n_tail, int64_t n_super,
                                     const uint8_t* w, int64_t out, const float* bias, float* y, int64_t g_begin,
                                     int64_t g_end);

}  // namespace tq
