// AVX-512 (F, BW, VL, VNNI) tiles for linear_stored(). This file is compiled with those
// instruction sets (CMakeLists.txt) and called only when the CPU has them. Like
// stored_matmul_avx2.cpp it includes no headers with inline C++ library code, so no
// AVX-512-compiled copy of a shared inline function can be picked by the linker for others.
#include "kernels/stored_matmul_avx512.h"

// GCC 12's own avx512fintrin.h trips -Wmaybe-uninitialized on its _mm512_undefined_* idiom.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "kernels/interleaved_rows.h"
#include "kernels/k_quant_slices_avx512.h"
#include "kernels/stored_matmul.h"

namespace tq {
namespace {

constexpr int kRows = 16;
// The K-type kernels prefetch the slice this far ahead of the one they read (8 blocks of a Q4_K
// group): the hardware prefetcher alone kept a 2560 x 151936 Q4_K product at 39 GB/s from DRAM on
// 2 cores, 49 GB/s at 2 blocks ahead, 76 GB/s at 8 (bench/linear_stored.cpp, BM_interleaved_Q4_K).
constexpr size_t kPrefetchAhead = 8 * kInterleavedQ4KBytes * kRows;

// Prefetches `bytes` from p + kPrefetchAhead (a hint: an address past the weights is harmless).
template <int kBytes>
inline void prefetch_ahead(const uint8_t* p) {
#pragma GCC unroll 16
  for (int line = 0; line < (kBytes + 63) / 64; ++line)
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAhead + 64 * line), _MM_HINT_T0);
}

// Activation values 4k..4k+3 in every 32-bit lane, loaded by the broadcast itself (a load, not a
// move from a general register).
inline __m512i act4(const int8_t* qa, int k) {
  return _mm512_castps_si512(_mm512_broadcastss_ps(_mm_load_ss(reinterpret_cast<const float*>(qa + 4 * k))));
}

// Eight lane accumulators (vector k: lane k of each row) summed in ggml's hsum order:
// (0+4, 2+6), (1+5, 3+7), then the two.
inline __m512 sum_lanes(const __m512* acc) {
  const __m512 r0 = _mm512_add_ps(acc[4], acc[0]), r1 = _mm512_add_ps(acc[5], acc[1]);
  const __m512 r2 = _mm512_add_ps(acc[6], acc[2]), r3 = _mm512_add_ps(acc[7], acc[3]);
  return _mm512_add_ps(_mm512_add_ps(r0, r2), _mm512_add_ps(r1, r3));
}

// One slice of 16 rows' 4-bit values in Q4_1's chunk order (interleaved_rows.h) against T tokens:
// for chunk k, the exact integer sums of 4 products of values 4k..4k+3 (low nibbles) and
// 16+4k..16+4k+3 (high nibbles), times dd[t] = scale·d_act, fused into lanes k and k + 4.
template <int T>
inline void nibble_slice(const uint8_t* chunks, const __m512* dd, const int8_t* const* qa, __m512 (*acc)[8]) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i chunk = _mm512_loadu_si512(chunks + 4 * kRows * k);
    const __m512i low = _mm512_and_si512(chunk, low4);
    const __m512i high = _mm512_and_si512(_mm512_srli_epi16(chunk, 4), low4);
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) {
      const __m512i lo_sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), low, act4(qa[t], k));
      const __m512i hi_sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), high, act4(qa[t], k + 4));
      acc[t][k] = _mm512_fmadd_ps(dd[t], _mm512_cvtepi32_ps(lo_sum), acc[t][k]);
      acc[t][k + 4] = _mm512_fmadd_ps(dd[t], _mm512_cvtepi32_ps(hi_sum), acc[t][k + 4]);
    }
  }
}

// Token t's part of one slice of a 4-bit group: dd[t] = scale·d_act, the offset chain
// offsets[t] += offset·s_act, and where its activation values are.
template <int T>
inline void slice_tokens(const ActivationBlock* act, int64_t act_stride, int64_t b, __m512 scale, __m512 offset,
                         __m512* dd, __m512* offsets, const int8_t** qa) {
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    const ActivationBlock& a = act[t * act_stride + b];
    dd[t] = _mm512_mul_ps(scale, _mm512_set1_ps(a.d));
    offsets[t] = _mm512_fmadd_ps(offset, _mm512_set1_ps(a.s), offsets[t]);
    qa[t] = a.qs;
  }
}

template <int T>
inline void zero_accumulators(__m512 (*acc)[8], __m512* offsets) {
#pragma GCC unroll 2
  for (int t = 0; t < T; ++t) {
    offsets[t] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) acc[t][k] = _mm512_setzero_ps();
  }
}

// T tokens against one group of 16 interleaved Q4_1 rows. Vector k of acc[t] holds lane k of each
// row's eight lane accumulators (lane k: values 4k..4k+3 of each slice), so every output sees
// exactly the row tile's operations: the exact integer sum of 4 products times d·d_act fused into
// lane k, the offsets m·s in their own chain, the lanes summed as (0+4, 2+6), (1+5, 3+7), the
// offsets added. total[t]: the 16 rows' outputs for token t (before the bias).
template <int T>
inline void q4_1_group(const uint8_t* group, int64_t n_slices, const ActivationBlock* act, const int32_t*,
                       int64_t act_stride, __m512* total) {
  constexpr size_t kSliceBytes = interleaved_slice_bytes(DType::Q4_1, kRows);
  __m512 acc[T][8], offsets[T];
  zero_accumulators<T>(acc, offsets);
  for (int64_t b = 0; b < n_slices; ++b, group += kSliceBytes) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group)));
    const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 2 * kRows)));
    __m512 dd[T];
    const int8_t* qa[T];  // token t's activation values
    slice_tokens<T>(act, act_stride, b, d, m, dd, offsets, qa);
    nibble_slice<T>(group + 4 * kRows, dd, qa, acc);
  }
#pragma GCC unroll 2
  for (int t = 0; t < T; ++t) total[t] = _mm512_add_ps(sum_lanes(acc[t]), offsets[t]);
}

// T tokens against one group of 16 interleaved Q8_0 rows, stored as q + 128 (unsigned): each
// lane's dpbusd starts from -128·(the 4 activation values' sum) (act_sums), so it ends at the exact
// signed dot Σ q·a that the row tile forms with the sign trick. The rest as q4_1_group, without
// offsets.
template <int T>
inline void q8_0_group(const uint8_t* group, int64_t n_slices, const ActivationBlock* act, const int32_t* act_sums,
                       int64_t act_stride, __m512* total) {
  constexpr size_t kSliceBytes = interleaved_slice_bytes(DType::Q8_0, kRows);
  __m512 acc[T][8];
#pragma GCC unroll 2
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) acc[t][k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_slices; ++b, group += kSliceBytes) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group)));
    __m512 dd[T];
    const int8_t* qa[T];
    const int32_t* start[T];  // -128 · Σ of values 4k..4k+3, k = 0..7
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) {
      const ActivationBlock& a = act[t * act_stride + b];
      dd[t] = _mm512_mul_ps(d, _mm512_set1_ps(a.d));
      qa[t] = a.qs;
      start[t] = act_sums + (t * act_stride + b) * 8;
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m512i chunk = _mm512_loadu_si512(group + 2 * kRows + 4 * kRows * k);
#pragma GCC unroll 2
      for (int t = 0; t < T; ++t) {
        const __m512i sum = _mm512_dpbusd_epi32(_mm512_set1_epi32(start[t][k]), chunk, act4(qa[t], k));
        acc[t][k] = _mm512_fmadd_ps(dd[t], _mm512_cvtepi32_ps(sum), acc[t][k]);
      }
    }
  }
#pragma GCC unroll 2
  for (int t = 0; t < T; ++t) total[t] = sum_lanes(acc[t]);
}

// Chunk k of slice j of super-block b (low: values 4k..4k+3 of the 16 rows, high: 16+4k..16+4k+3)
// against T tokens' activations, into each token's two dpbusd chains.
template <int T>
inline void dot_chunk(__m512i low, __m512i high, const SuperblockActivation* act, int64_t act_stride, int64_t b, int j,
                      int k, __m512i* lo_sum, __m512i* hi_sum) {
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    const int8_t* qa = act[t * act_stride + b].qs + 32 * j;
    lo_sum[t] = _mm512_dpbusd_epi32(lo_sum[t], low, act4(qa, k));
    hi_sum[t] = _mm512_dpbusd_epi32(hi_sum[t], high, act4(qa, k + 4));
  }
}

// T tokens against one group of 16 interleaved Q4_K rows (dot_k_superblocks_reference): per
// super-block, each slice's 32 products summed exactly (dpbusd into two chains, low and high
// nibbles) times the slice's integer scale, summed in int32; the minima's sum by VPDPWSSD from pairs
// of slice minima and pairs of the activations' slice sums; then fma(d·d_act, isum) and
// fnmadd(dmin·d_act, msum) into one fp32 chain per row.
template <int T>
inline void q4_k_group(const uint8_t* group, int64_t n_super, const SuperblockActivation* act, int64_t act_stride,
                       __m512* total) {
  __m512 acc[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < n_super; ++b, group += kInterleavedQ4KBytes * kRows) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 2 * kRows)));
    __m512i isum[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      const uint8_t* slice = group + 4 * kRows + 18 * kRows * j;
      prefetch_ahead<18 * kRows>(slice);
      const __m512i scale = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(slice)));
      __m512i lo_sum[T], hi_sum[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) lo_sum[t] = hi_sum[t] = _mm512_setzero_si512();
      const uint8_t* chunks = slice + 2 * kRows;
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i chunk = _mm512_loadu_si512(chunks + 4 * kRows * k);
        const __m512i low = _mm512_and_si512(chunk, low4);
        const __m512i high = _mm512_and_si512(_mm512_srli_epi16(chunk, 4), low4);
        dot_chunk<T>(low, high, act, act_stride, b, j, k, lo_sum, hi_sum);
      }
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t)
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_add_epi32(lo_sum[t], hi_sum[t]), scale));
    }
    __m512i min_pairs[4];  // per row, the mins of slices 2p (low half) and 2p + 1 (high half)
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const uint8_t* even = group + 4 * kRows + 18 * kRows * (2 * p) + kRows;
      const __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(even)));
      const __m512i hi = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(even + 18 * kRows)));
      min_pairs[p] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const SuperblockActivation& a = act[t * act_stride + b];
      __m512i msum = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        const int32_t even = a.sums[4 * p] + a.sums[4 * p + 1], odd = a.sums[4 * p + 2] + a.sums[4 * p + 3];
        msum = _mm512_dpwssd_epi32(msum, min_pairs[p], _mm512_set1_epi32((even & 0xFFFF) | (odd << 16)));
      }
      const __m512 d_act = _mm512_set1_ps(a.d);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, d_act), _mm512_cvtepi32_ps(isum[t]), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, d_act), _mm512_cvtepi32_ps(msum), acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) total[t] = acc[t];
}

// T tokens against one group of 16 interleaved Q6_K rows, values stored as q + 32 (unsigned 0..63,
// four bits in a nibble chunk and two in a top-bits chunk), per super-block
// (dot_k_superblocks_reference): each 16 values' products summed exactly, the dpbusd chain starting
// from -32·(their activation sum) so it ends at the signed Σ (q - 32)·a, times the run's int8 scale,
// summed in int32; then fma(d·d_act, isum) into one fp32 chain per row.
template <int T>
inline void q6_k_group(const uint8_t* group, int64_t n_super, const SuperblockActivation* act, int64_t act_stride,
                       __m512* total) {
  __m512 acc[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_super; ++b, group += kInterleavedQ6KBytes * kRows) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group)));
    __m512i isum[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      const uint8_t* slice = group + 2 * kRows + 26 * kRows * j;
      prefetch_ahead<26 * kRows>(slice);
      const __m512i scale_lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(slice)));
      const __m512i scale_hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(slice + kRows)));
      __m512i lo_sum[T], hi_sum[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const SuperblockActivation& a = act[t * act_stride + b];
        lo_sum[t] = _mm512_set1_epi32(-32 * a.sums[2 * j]);
        hi_sum[t] = _mm512_set1_epi32(-32 * a.sums[2 * j + 1]);
      }
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        __m512i low, high;  // values 4k..4k+3 and 16+4k..16+4k+3
        q6_k_chunk_values(slice, k, &low, &high);
        dot_chunk<T>(low, high, act, act_stride, b, j, k, lo_sum, hi_sum);
      }
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t)
        isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(lo_sum[t], scale_lo),
                                                             _mm512_mullo_epi32(hi_sum[t], scale_hi)));
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(act[t * act_stride + b].d)),
                               _mm512_cvtepi32_ps(isum[t]), acc[t]);
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) total[t] = acc[t];
}

template <int T>
inline void store_group(const __m512* total, int64_t rows, const float* bias, int64_t o0, int64_t out, float* y) {
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    float v[kRows];
    _mm512_storeu_ps(v, total[t]);
    float* dst = y + t * out + o0;
    for (int64_t r = 0; r < rows; ++r) dst[r] = bias ? v[r] + bias[o0 + r] : v[r];
  }
}

// kMaxTokens: tokens per pass over a group (the K-quants' few accumulators leave registers for 4;
// the eight-lane formats take 2). A group is n_units units (slices of 32, or the K-quants'
// super-blocks of 256) of unit_bytes; act: [n, n_units]; act_sums (Q8_0): [n, n_units, 8] or null.
template <int kMaxTokens, class Act, class GroupFn>
void run_groups(const GroupFn& group_fn, size_t unit_bytes, const Act* act, const int32_t* act_sums, int64_t n,
                int64_t n_units, const uint8_t* w, int64_t out, const float* bias, float* y, int64_t g_begin,
                int64_t g_end) {
  auto sums_of = [&](int64_t tok) { return act_sums ? act_sums + tok * n_units * 8 : nullptr; };
  for (int64_t g = g_begin; g < g_end; ++g) {
    const uint8_t* group = w + static_cast<size_t>(g) * n_units * unit_bytes;
    const int64_t o0 = g * kRows, rows = out - o0 < kRows ? out - o0 : kRows;
    // Several tokens at a time (each loaded chunk serves them all); the group's slices stay in L1.
    int64_t tok = 0;
    if constexpr (kMaxTokens >= 4) {
      for (; tok + 4 <= n; tok += 4) {
        __m512 total[4];
        group_fn.template operator()<4>(group, n_units, act + tok * n_units, sums_of(tok), n_units, total);
        store_group<4>(total, rows, bias, o0, out, y + tok * out);
      }
    }
    for (; tok + 2 <= n; tok += 2) {
      __m512 total[2];
      group_fn.template operator()<2>(group, n_units, act + tok * n_units, sums_of(tok), n_units, total);
      store_group<2>(total, rows, bias, o0, out, y + tok * out);
    }
    if (tok < n) {
      __m512 total[1];
      group_fn.template operator()<1>(group, n_units, act + tok * n_units, sums_of(tok), n_units, total);
      store_group<1>(total, rows, bias, o0, out, y + tok * out);
    }
  }
}

}  // namespace

bool stored_matmul_avx512_available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
                         __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return ok;
}

bool quantize_superblock_activations_avx512(const float* x, int64_t n_elems, SuperblockActivation* blocks) {
  const __m512 largest = _mm512_set1_ps(3.40282347e38f);
  for (int64_t b = 0; b < n_elems / 256; ++b) {
    const float* v = x + b * 256;
    __m512 magnitude = _mm512_setzero_ps();
    __mmask16 finite = 0xFFFF;
    for (int r = 0; r < 16; ++r) {
      const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(v + 16 * r));
      finite &= _mm512_cmp_ps_mask(a, largest, _CMP_LE_OQ);  // false for inf and NaN
      magnitude = _mm512_max_ps(magnitude, a);
    }
    if (finite != 0xFFFF) return false;
    const float amax = _mm512_reduce_max_ps(magnitude);  // a maximum: the order does not matter
    const __m512 id = _mm512_set1_ps(127.0f / amax <= 3.40282347e38f ? 127.0f / amax : 0.0f);
    for (int r = 0; r < 16; ++r) {
      // Rounded half to even (the default rounding mode), as nearbyint; |q| <= 127, so the narrowing is exact.
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(v + 16 * r), id));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(blocks[b].qs + 16 * r), _mm512_cvtepi32_epi8(q));
      blocks[b].sums[r] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
    blocks[b].d = amax / 127.0f;
  }
  return true;
}

void activation_group_sums(const ActivationBlock* act, int64_t n_blocks, int32_t* sums) {
  for (int64_t i = 0; i < n_blocks; ++i)
    for (int k = 0; k < 8; ++k) {
      const int8_t* q = act[i].qs + 4 * k;
      sums[i * 8 + k] = -128 * (q[0] + q[1] + q[2] + q[3]);
    }
}

void linear_interleaved16_avx512_groups(DType t, const ActivationBlock* act, const int32_t* act_sums, int64_t n,
                                        int64_t n_slices, const uint8_t* w, int64_t out, const float* bias, float* y,
                                        int64_t g_begin, int64_t g_end) {
  // The first argument of each call: the group kernel with its T as a template argument.
  if (t == DType::Q4_1) {
    auto fn = []<int T>(const uint8_t* g, int64_t s, const ActivationBlock* a, const int32_t* sums, int64_t stride,
                        __m512* total) { q4_1_group<T>(g, s, a, sums, stride, total); };
    run_groups<2>(fn, interleaved_slice_bytes(t, kRows), act, nullptr, n, n_slices, w, out, bias, y, g_begin, g_end);
  } else if (t == DType::Q8_0) {
    auto fn = []<int T>(const uint8_t* g, int64_t s, const ActivationBlock* a, const int32_t* sums, int64_t stride,
                        __m512* total) { q8_0_group<T>(g, s, a, sums, stride, total); };
    run_groups<2>(fn, interleaved_slice_bytes(t, kRows), act, act_sums, n, n_slices, w, out, bias, y, g_begin, g_end);
  }
}

void linear_interleaved16_k_avx512_groups(DType t, const SuperblockActivation* act, int64_t n, int64_t n_super,
                                          const uint8_t* w, int64_t out, const float* bias, float* y, int64_t g_begin,
                                          int64_t g_end) {
  if (t == DType::Q4_K) {
    auto fn = []<int T>(const uint8_t* g, int64_t s, const SuperblockActivation* a, const int32_t*, int64_t stride,
                        __m512* total) { q4_k_group<T>(g, s, a, stride, total); };
    run_groups<4>(fn, kInterleavedQ4KBytes * kRows, act, nullptr, n, n_super, w, out, bias, y, g_begin, g_end);
  } else if (t == DType::Q6_K) {
    auto fn = []<int T>(const uint8_t* g, int64_t s, const SuperblockActivation* a, const int32_t*, int64_t stride,
                        __m512* total) { q6_k_group<T>(g, s, a, stride, total); };
    run_groups<4>(fn, kInterleavedQ6KBytes * kRows, act, nullptr, n, n_super, w, out, bias, y, g_begin, g_end);
  }
}

}  // namespace tq
