// AVX2 tiles for linear_stored(). This file is compiled with -mavx2 -mfma -mf16c (CMakeLists.txt)
// and called only when the CPU has them. It includes no headers with inline C++ library code,
// so no AVX2-compiled copy of a shared inline function can be picked by the linker for others.
//
// A tile computes R weight rows against T tokens: the R rows' slices are unpacked once per
// slice and reused for all T tokens, the T tokens' activations once for all R rows. Each output
// element still has its own accumulator and sees exactly the operations of
// linear_stored_reference, in the same order, so the tile shape never changes a result.
#include "kernels/stored_matmul_avx2.h"

#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/ggml_blocks.h"
#include "kernels/interleaved_rows.h"
#include "kernels/stored_matmul.h"

namespace tq {
namespace {

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Low nibbles of 16 bytes as values 0..15, high nibbles as 16..31 (legacy block order).
inline __m256i legacy_nibbles(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_insertf128_si256(_mm256_castsi128_si256(packed), _mm_srli_epi16(packed, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Each byte of v shifted right by `bits` (< 8), masked to `mask`.
inline __m256i byte_field(__m256i v, int bits, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(bits)), _mm256_set1_epi8(static_cast<char>(mask)));
}

// Block b of a row.
template <class Block>
inline const uint8_t* block_at(const uint8_t* row, int64_t b) {
  return row + b * static_cast<int64_t>(sizeof(Block));
}

// A slice as the tiles use it: q (signed or unsigned bytes), its per-lane scale, its offset.
struct Slice {
  __m256i q;
  __m256 scale;
  float offset;
};

// Per type: Signed (q may be negative: the products use the sign trick), Offset (an offset
// chain exists), load(row, slice index).
struct Q8_0 {
  static constexpr bool kSigned = true, kOffset = false;
  static Slice load(const uint8_t* row, int64_t b) {
    const uint8_t* blk = block_at<BlockQ8_0>(row, b);
    return {load32(blk + offsetof(BlockQ8_0, qs)), _mm256_set1_ps(f16(blk + offsetof(BlockQ8_0, d))), 0.0f};
  }
};

struct Q4_0 {
  static constexpr bool kSigned = true, kOffset = false;
  static Slice load(const uint8_t* row, int64_t b) {
    const uint8_t* blk = block_at<BlockQ4_0>(row, b);
    return {_mm256_sub_epi8(legacy_nibbles(blk + offsetof(BlockQ4_0, qs)), _mm256_set1_epi8(8)),
            _mm256_set1_ps(f16(blk + offsetof(BlockQ4_0, d))), 0.0f};
  }
};

struct Q4_1 {
  static constexpr bool kSigned = false, kOffset = true;
  static Slice load(const uint8_t* row, int64_t b) {
    const uint8_t* blk = block_at<BlockQ4_1>(row, b);
    return {legacy_nibbles(blk + offsetof(BlockQ4_1, qs)), _mm256_set1_ps(f16(blk + offsetof(BlockQ4_1, d))),
            f16(blk + offsetof(BlockQ4_1, m))};
  }
};

// The K-quants by super-block (kernels/stored_matmul.h): Minima (Q4_K/Q5_K: a min per slice times
// the activations' sums), values(row, slice) as bytes (unsigned 0..15/0..31, or Q6_K's q - 32 signed),
// scales(block, ...) the integer scale of each 16 values, the min of each 32, and fp32 d and dmin.
// Q4_K and Q5_K: the same d, dmin and scales fields; Q5_K adds qh.
template <bool kFiveBits>
struct Q45_K {
  static constexpr bool kSigned = false, kMinima = true;
  using Block = std::conditional_t<kFiveBits, BlockQ5_K, BlockQ4_K>;
  static __m256i values(const uint8_t* blk, int j) {
    const size_t qs = kFiveBits ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
    __m256i q = byte_field(load32(blk + qs + 32 * (j / 2)), 4 * (j & 1), 0x0F);
    if (kFiveBits) {
      const __m256i fifth = byte_field(load32(blk + offsetof(BlockQ5_K, qh)), j, 1);
      q = _mm256_or_si256(q, _mm256_slli_epi16(fifth, 4));
    }
    return q;
  }
  static void scales(const uint8_t* blk, int32_t* scale, int32_t* min, float* d, float* dmin) {
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k4_scale_min(blk + offsetof(BlockQ4_K, scales), j, &sc, &m);
      scale[2 * j] = scale[2 * j + 1] = sc;
      min[j] = m;
    }
    *d = f16(blk + offsetof(BlockQ4_K, d));
    *dmin = f16(blk + offsetof(BlockQ4_K, dmin));
  }
};

struct Q6_K {
  static constexpr bool kSigned = true, kMinima = false;
  using Block = BlockQ6_K;
  static __m256i values(const uint8_t* blk, int j) {
    const int half = j / 4, run = j % 4;
    const __m256i low =
        byte_field(load32(blk + offsetof(BlockQ6_K, ql) + 64 * half + 32 * (run & 1)), run >= 2 ? 4 : 0, 0x0F);
    const __m256i high =
        _mm256_slli_epi16(byte_field(load32(blk + offsetof(BlockQ6_K, qh) + 32 * half), 2 * run, 3), 4);
    return _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
  }
  static void scales(const uint8_t* blk, int32_t* scale, int32_t* min, float* d, float* dmin) {
    const auto* stored = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ6_K, scales));
    for (int r = 0; r < 16; ++r) scale[r] = stored[r];
    for (int j = 0; j < 8; ++j) min[j] = 0;
    *d = f16(blk + offsetof(BlockQ6_K, d));
    *dmin = 0;
  }
};

// Lane k = Σ of products 4k..4k+3 of unsigned bytes u and signed bytes s.
inline __m256i lane_ints(__m256i u, __m256i s) {
  const __m256i pairs = _mm256_maddubs_epi16(u, s);  // |pair| ≤ 2·128·127: no saturation
  return _mm256_madd_epi16(_mm256_set1_epi16(1), pairs);
}

inline __m256 lane_sums(__m256i u, __m256i s) { return _mm256_cvtepi32_ps(lane_ints(u, s)); }

// The sum of four int32 lanes (exact: the order does not matter).
inline int32_t sum4(__m128i v) {
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(v, _mm_shuffle_epi32(v, 0xB1)));
}

// ggml's hsum_float_8 order: (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then the two.
inline float sum_lanes(__m256 acc) {
  float l[8];
  _mm256_storeu_ps(l, acc);
  const float r0 = l[4] + l[0], r1 = l[5] + l[1], r2 = l[6] + l[2], r3 = l[7] + l[3];
  return (r0 + r2) + (r1 + r3);
}

// f(0), f(1), …, f(N-1) with constant arguments, so that arrays indexed by them stay in
// registers (GCC does not fully unroll the nested loops of a tile by itself).
template <int N, class F>
__attribute__((always_inline)) inline void unrolled(const F& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(I), ...); }(std::make_integer_sequence<int, N>{});
}

// R rows (w, stride row_bytes) × T tokens (act, stride n_slices) → y[t·out + r].
template <class W, int R, int T>
void slice_tile(const uint8_t* w, size_t row_bytes, const ActivationBlock* act, int64_t n_slices, int64_t out,
                const float* bias, float* y) {
  __m256 acc[R][T];
  float offsets[R][T];
  unrolled<R>([&](int r) {
    unrolled<T>([&](int t) {
      acc[r][t] = _mm256_setzero_ps();
      offsets[r][t] = 0.0f;
    });
  });
  for (int64_t b = 0; b < n_slices; ++b) {
    Slice s[R];
    __m256i magnitude[R];
    unrolled<R>([&](int r) {
      s[r] = W::load(w + r * row_bytes, b);
      if (W::kSigned) magnitude[r] = _mm256_sign_epi8(s[r].q, s[r].q);
    });
    unrolled<T>([&](int t) {
      const ActivationBlock& a = act[t * n_slices + b];
      const __m256i qa = load32(reinterpret_cast<const uint8_t*>(a.qs));
      const __m256 da = _mm256_set1_ps(a.d);
      unrolled<R>([&](int r) {
        const __m256 sums = W::kSigned ? lane_sums(magnitude[r], _mm256_sign_epi8(qa, s[r].q)) : lane_sums(s[r].q, qa);
        acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(s[r].scale, da), sums, acc[r][t]);
        if (W::kOffset) offsets[r][t] = __builtin_fmaf(s[r].offset, a.s, offsets[r][t]);
      });
    });
  }
  unrolled<R>([&](int r) {
    unrolled<T>([&](int t) {
      const float v = W::kOffset ? sum_lanes(acc[r][t]) + offsets[r][t] : sum_lanes(acc[r][t]);
      y[t * out + r] = bias ? v + bias[r] : v;
    });
  });
}

// The sum of eight int32 lanes (exact: the order does not matter).
inline int32_t sum8(__m256i v) { return sum4(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1))); }

// R rows × T tokens of a K-quant (dot_k_superblocks_reference): per super-block each lane's exact
// sums of 4 products times its run's integer scale, summed in int32, the minima's sum in int32,
// then one FMA (two with minima) into each output's fp32 chain.
template <class W, int R, int T>
void k_superblock_tile(const uint8_t* w, size_t row_bytes, const SuperblockActivation* act, int64_t n_super,
                       int64_t out, const float* bias, float* y) {
  float acc[R][T];
  unrolled<R>([&](int r) { unrolled<T>([&](int t) { acc[r][t] = 0.0f; }); });
  for (int64_t b = 0; b < n_super; ++b) {
    int32_t scale[R][16], min[R][8];
    float d[R], dmin[R];
    const uint8_t* blk[R];
    unrolled<R>([&](int r) {
      blk[r] = block_at<typename W::Block>(w + r * row_bytes, b);
      W::scales(blk[r], scale[r], min[r], &d[r], &dmin[r]);
    });
    __m256i isum[R][T];
    unrolled<R>([&](int r) { unrolled<T>([&](int t) { isum[r][t] = _mm256_setzero_si256(); }); });
    for (int j = 0; j < 8; ++j) {
      __m256i q[R], magnitude[R], run_scale[R];  // run_scale: lanes 0-3 values 0..15, lanes 4-7 16..31
      unrolled<R>([&](int r) {
        q[r] = W::values(blk[r], j);
        if (W::kSigned) magnitude[r] = _mm256_sign_epi8(q[r], q[r]);
        run_scale[r] = _mm256_setr_epi32(scale[r][2 * j], scale[r][2 * j], scale[r][2 * j], scale[r][2 * j],
                                         scale[r][2 * j + 1], scale[r][2 * j + 1], scale[r][2 * j + 1],
                                         scale[r][2 * j + 1]);
      });
      unrolled<T>([&](int t) {
        const __m256i qa = load32(reinterpret_cast<const uint8_t*>(act[t * n_super + b].qs + 32 * j));
        unrolled<R>([&](int r) {
          const __m256i lanes = W::kSigned ? lane_ints(magnitude[r], _mm256_sign_epi8(qa, q[r])) : lane_ints(q[r], qa);
          isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_mullo_epi32(lanes, run_scale[r]));
        });
      });
    }
    unrolled<T>([&](int t) {
      const SuperblockActivation& a = act[t * n_super + b];
      unrolled<R>([&](int r) {
        acc[r][t] = __builtin_fmaf(d[r] * a.d, static_cast<float>(sum8(isum[r][t])), acc[r][t]);
        if (W::kMinima) {
          int32_t msum = 0;
          for (int j = 0; j < 8; ++j) msum += min[r][j] * (int32_t{a.sums[2 * j]} + int32_t{a.sums[2 * j + 1]});
          acc[r][t] = __builtin_fmaf(-(dmin[r] * a.d), static_cast<float>(msum), acc[r][t]);
        }
      });
    });
  }
  unrolled<R>([&](int r) {
    unrolled<T>([&](int t) { y[t * out + r] = bias ? acc[r][t] + bias[r] : acc[r][t]; });
  });
}

// Widened F16/BF16: 8 values at p as fp32.
template <bool kBf16>
inline __m256 widen8(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (kBf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

template <bool kBf16>
inline float widen1(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (kBf16) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  return _cvtsh_ss(h);
}

// R F16/BF16 rows × T fp32 tokens (x, stride in) → y[t·out + r].
template <bool kBf16, int R, int T>
void half_tile(const uint8_t* w, size_t row_bytes, const float* x, int64_t in, int64_t out, const float* bias,
               float* y) {
  __m256 acc[R][T];
  unrolled<R>([&](int r) { unrolled<T>([&](int t) { acc[r][t] = _mm256_setzero_ps(); }); });
  const int64_t body = in - in % 8;
  for (int64_t k = 0; k < body; k += 8) {
    __m256 wv[R];
    unrolled<R>([&](int r) { wv[r] = widen8<kBf16>(w + r * row_bytes + 2 * k); });
    unrolled<T>([&](int t) {
      const __m256 xv = _mm256_loadu_ps(x + t * in + k);
      unrolled<R>([&](int r) { acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]); });
    });
  }
  unrolled<R>([&](int r) {
    unrolled<T>([&](int t) {
      float v = sum_lanes(acc[r][t]);
      for (int64_t k = body; k < in; ++k) v = __builtin_fmaf(widen1<kBf16>(w + r * row_bytes + 2 * k), x[t * in + k], v);
      y[t * out + r] = bias ? v + bias[r] : v;
    });
  });
}

// The tile shapes used: 4 rows × 1 token for decode (independent FMA chains to hide latency),
// 2 rows × 4 tokens for batches (8 accumulators reuse each unpacked slice four times). Panels
// [p_begin, p_end) of kStoredPanelRows rows, on the calling thread.
template <class Tile>
void run_panels(int64_t n, int64_t out, int64_t p_begin, int64_t p_end, const Tile& tile) {
  for (int64_t p = p_begin; p < p_end; ++p) {
    const int64_t o_end = (p + 1) * kStoredPanelRows < out ? (p + 1) * kStoredPanelRows : out;
    if (n == 1) {
      for (int64_t o = p * kStoredPanelRows; o < o_end; o += 4) tile.template operator()<4, 1>(o, 0, o_end - o, 1);
    } else {
      for (int64_t t = 0; t < n; t += 4)
        for (int64_t o = p * kStoredPanelRows; o < o_end; o += 2) tile.template operator()<2, 4>(o, t, o_end - o, n - t);
    }
  }
}

// Calls tile_fn<R', T'> with R' = min(R, rows_left), T' = min(T, tokens_left).
template <int R, int T, class F>
void shaped(int64_t rows_left, int64_t tokens_left, const F& tile_fn) {
  if constexpr (R > 1) {
    if (rows_left < R) return shaped<R - 1, T>(rows_left, tokens_left, tile_fn);
  }
  if constexpr (T > 1) {
    if (tokens_left < T) return shaped<R, T - 1>(rows_left, tokens_left, tile_fn);
  }
  tile_fn.template operator()<R, T>();
}

template <class W>
void run_slices(const ActivationBlock* act, int64_t n, int64_t n_slices, const uint8_t* w, size_t row_bytes,
                int64_t out, const float* bias, float* y, int64_t p_begin, int64_t p_end) {
  auto tile = [&]<int R, int T>(int64_t o, int64_t t, int64_t rows_left, int64_t tokens_left) {
    shaped<R, T>(rows_left, tokens_left, [&]<int R2, int T2>() {
      slice_tile<W, R2, T2>(w + o * row_bytes, row_bytes, act + t * n_slices, n_slices, out, bias ? bias + o : nullptr,
                            y + t * out + o);
    });
  };
  run_panels(n, out, p_begin, p_end, tile);
}

template <class W>
void run_k_superblocks(const SuperblockActivation* act, int64_t n, int64_t n_super, const uint8_t* w,
                       size_t row_bytes, int64_t out, const float* bias, float* y, int64_t p_begin, int64_t p_end) {
  auto tile = [&]<int R, int T>(int64_t o, int64_t t, int64_t rows_left, int64_t tokens_left) {
    shaped<R, T>(rows_left, tokens_left, [&]<int R2, int T2>() {
      k_superblock_tile<W, R2, T2>(w + o * row_bytes, row_bytes, act + t * n_super, n_super, out,
                                   bias ? bias + o : nullptr, y + t * out + o);
    });
  };
  run_panels(n, out, p_begin, p_end, tile);
}

template <bool kBf16>
void run_half(const float* x, int64_t n, int64_t in, const uint8_t* w, size_t row_bytes, int64_t out,
              const float* bias, float* y, int64_t p_begin, int64_t p_end) {
  auto tile = [&]<int R, int T>(int64_t o, int64_t t, int64_t rows_left, int64_t tokens_left) {
    shaped<R, T>(rows_left, tokens_left, [&]<int R2, int T2>() {
      half_tile<kBf16, R2, T2>(w + o * row_bytes, row_bytes, x + t * in, in, out, bias ? bias + o : nullptr,
                               y + t * out + o);
    });
  };
  run_panels(n, out, p_begin, p_end, tile);
}

// Interleaved Q4_1 (kernels/interleaved_rows.h): 8 rows × 1 token. Vector k of acc holds lane k
// of each of the 8 rows' accumulators, so every row sees exactly slice_tile's operations: the
// exact integer sum of values 4k..4k+3, times d·d_act, fused into lane k; the offset chain;
// the lanes summed in sum_lanes' order; the offset; the bias.
inline void q4_1_group_token(const uint8_t* group, int64_t n_slices, const ActivationBlock* act, __m256* total) {
  __m256 acc[8];
  __m256 offsets = _mm256_setzero_ps();
  unrolled<8>([&](int k) { acc[k] = _mm256_setzero_ps(); });
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < n_slices; ++b, group += interleaved_slice_bytes(DType::Q4_1, 8)) {
    const ActivationBlock& a = act[b];
    const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(group))),
                                   _mm256_set1_ps(a.d));
    const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(group + 16)));
    offsets = _mm256_fmadd_ps(m, _mm256_set1_ps(a.s), offsets);
    int32_t qa[8];  // activation values 4k..4k+3 as one int32, broadcast to the 8 rows
    std::memcpy(qa, a.qs, 32);
    unrolled<4>([&](int k) {
      const __m256i chunk = load32(group + 32 + 32 * k);
      const __m256i low = _mm256_and_si256(chunk, low4), high = _mm256_and_si256(_mm256_srli_epi16(chunk, 4), low4);
      acc[k] = _mm256_fmadd_ps(d, lane_sums(low, _mm256_set1_epi32(qa[k])), acc[k]);
      acc[k + 4] = _mm256_fmadd_ps(d, lane_sums(high, _mm256_set1_epi32(qa[k + 4])), acc[k + 4]);
    });
  }
  const __m256 r0 = _mm256_add_ps(acc[4], acc[0]), r1 = _mm256_add_ps(acc[5], acc[1]);
  const __m256 r2 = _mm256_add_ps(acc[6], acc[2]), r3 = _mm256_add_ps(acc[7], acc[3]);
  *total = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(r0, r2), _mm256_add_ps(r1, r3)), offsets);
}

}  // namespace

bool quantize_activations_avx2(const float* x, int64_t n_elems, ActivationBlock* blocks) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f), largest = _mm256_set1_ps(3.40282347e38f);
  for (int64_t b = 0; b < n_elems / 32; ++b) {
    __m256 v[4], magnitude = _mm256_setzero_ps(), finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + b * 32 + 8 * i);
      const __m256 a = _mm256_andnot_ps(sign_bit, v[i]);
      finite = _mm256_and_ps(finite, _mm256_cmp_ps(a, largest, _CMP_LE_OQ));  // false for inf and NaN
      magnitude = _mm256_max_ps(magnitude, a);
    }
    if (_mm256_movemask_ps(finite) != 0xFF) return false;
    float m[8];
    _mm256_storeu_ps(m, magnitude);
    float amax = 0;
    for (float e : m) amax = e > amax ? e : amax;  // a maximum: the order does not matter
    const float d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(127.0f / amax <= 3.40282347e38f ? 127.0f / amax : 0.0f);
    __m256i q[4];
    __m256i sum = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
      q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      sum = _mm256_add_epi32(sum, q[i]);
    }
    // Pack 32 int32 to int8 in order (the packs interleave 128-bit halves; the permute undoes it).
    const __m256i q16a = _mm256_packs_epi32(q[0], q[1]), q16b = _mm256_packs_epi32(q[2], q[3]);
    const __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16a, q16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(blocks[b].qs), q8);
    int32_t s[8];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(s), sum);
    const int32_t total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    blocks[b].d = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
    blocks[b].s = _cvtsh_ss(_cvtss_sh(d * static_cast<float>(total), _MM_FROUND_TO_NEAREST_INT));
  }
  return true;
}

bool quantize_superblock_activations_avx2(const float* x, int64_t n_elems, SuperblockActivation* blocks) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f), largest = _mm256_set1_ps(3.40282347e38f);
  for (int64_t b = 0; b < n_elems / 256; ++b) {
    const float* v = x + b * 256;
    __m256 magnitude = _mm256_setzero_ps(), finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int i = 0; i < 32; ++i) {
      const __m256 a = _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(v + 8 * i));
      finite = _mm256_and_ps(finite, _mm256_cmp_ps(a, largest, _CMP_LE_OQ));  // false for inf and NaN
      magnitude = _mm256_max_ps(magnitude, a);
    }
    if (_mm256_movemask_ps(finite) != 0xFF) return false;
    float m[8];
    _mm256_storeu_ps(m, magnitude);
    float amax = 0;
    for (float e : m) amax = e > amax ? e : amax;  // a maximum: the order does not matter
    const __m256 id = _mm256_set1_ps(127.0f / amax <= 3.40282347e38f ? 127.0f / amax : 0.0f);
    for (int r = 0; r < 16; ++r) {
      const __m256i q0 = _mm256_cvtps_epi32(
          _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + 16 * r), id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      const __m256i q1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + 16 * r + 8), id),
                                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      // 16 int32 to int16 in order (packs interleaves 128-bit halves; the permute undoes it), then bytes.
      const __m256i q16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8);
      const __m128i q8 = _mm_packs_epi16(_mm256_castsi256_si128(q16), _mm256_extracti128_si256(q16, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(blocks[b].qs + 16 * r), q8);
      blocks[b].sums[r] = static_cast<int16_t>(sum8(_mm256_add_epi32(q0, q1)));
    }
    blocks[b].d = amax / 127.0f;
  }
  return true;
}

void linear_slices_avx2_panels(DType t, const ActivationBlock* act, int64_t n, int64_t n_slices, const uint8_t* w,
                               size_t row_bytes, int64_t out, const float* bias, float* y, int64_t p_begin,
                               int64_t p_end) {
#define TQ_RUN(W) return run_slices<W>(act, n, n_slices, w, row_bytes, out, bias, y, p_begin, p_end)
  switch (t) {
    case DType::Q8_0: TQ_RUN(Q8_0);
    case DType::Q4_0: TQ_RUN(Q4_0);
    case DType::Q4_1: TQ_RUN(Q4_1);
    default: return;  // linear_stored() checked the type
  }
#undef TQ_RUN
}

void linear_k_superblocks_avx2_panels(DType t, const SuperblockActivation* act, int64_t n, int64_t n_super,
                                      const uint8_t* w, size_t row_bytes, int64_t out, const float* bias, float* y,
                                      int64_t p_begin, int64_t p_end) {
#define TQ_RUN(W) return run_k_superblocks<W>(act, n, n_super, w, row_bytes, out, bias, y, p_begin, p_end)
  switch (t) {
    case DType::Q4_K: TQ_RUN(Q45_K<false>);
    case DType::Q5_K: TQ_RUN(Q45_K<true>);
    case DType::Q6_K: TQ_RUN(Q6_K);
    default: return;  // linear_stored() checked the type
  }
#undef TQ_RUN
}

void linear_half_avx2_panels(DType t, const float* x, int64_t n, int64_t in, const uint8_t* w, size_t row_bytes,
                             int64_t out, const float* bias, float* y, int64_t p_begin, int64_t p_end) {
  if (t == DType::BF16) return run_half<true>(x, n, in, w, row_bytes, out, bias, y, p_begin, p_end);
  run_half<false>(x, n, in, w, row_bytes, out, bias, y, p_begin, p_end);
}

void linear_interleaved_avx2_groups(DType t, const ActivationBlock* act, int64_t n, int64_t n_slices,
                                    const uint8_t* w, int64_t out, const float* bias, float* y, int64_t g_begin,
                                    int64_t g_end) {
  if (t != DType::Q4_1) return;  // linear_stored_many() checked the type
  for (int64_t g = g_begin; g < g_end; ++g) {
    const uint8_t* group = w + static_cast<size_t>(g) * n_slices * interleaved_slice_bytes(DType::Q4_1, 8);
    const int64_t o0 = g * 8, rows = out - o0 < 8 ? out - o0 : 8;
    // Token by token: the group's slices (n_slices · 160 bytes) stay in L1 for the next token.
    for (int64_t tok = 0; tok < n; ++tok) {
      __m256 total;
      q4_1_group_token(group, n_slices, act + tok * n_slices, &total);
      float v[8];
      _mm256_storeu_ps(v, total);
      float* dst = y + tok * out + o0;
      for (int64_t r = 0; r < rows; ++r) dst[r] = bias ? v[r] + bias[o0 + r] : v[r];
    }
  }
}

}  // namespace tq
