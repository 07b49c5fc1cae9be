// AMX tiles for linear_stored()'s K-quant products (kernels/stored_matmul_amx.h). This file is
// compiled with -mamx-tile -mamx-int8 and the AVX-512 flags (CMakeLists.txt) and called only when
// stored_matmul_amx_available() says the CPU and the kernel allow them. Like
// stored_matmul_avx512.cpp it instantiates no C++ library templates, so no AMX-compiled copy of a
// shared inline function can be picked by the linker for others.
//
// Why tiles: one TDPBSUD multiplies 16 tokens by 16 weight rows over 32 values (8192 products,
// summed exactly in int32) where the VNNI kernel needs 128 dpbusd; what stays on the vector units
// is the fp32 work per slice that the K-quant order prescribes (scale the exact sum, add it to the
// token's chain), which is what bounds this kernel.
#include "kernels/stored_matmul_amx.h"

// GCC 12's own avx512fintrin.h trips -Wmaybe-uninitialized on its _mm512_undefined_* idiom.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "kernels/interleaved_rows.h"
#include "kernels/k_quant_slices_avx512.h"
#include "kernels/stored_matmul.h"
#include "kernels/stored_matmul_avx512.h"

namespace tq {
namespace {

constexpr int kRows = 16;

// One 32-value slice of a group, unpacked once per call for every block of 16 tokens:
//   Q4_K: b = the B tile of TDPBSUD: 8 rows of 64 bytes, row k (k = 0..3) the 16 weight rows'
//         values 4k..4k+3 (one byte each, 0..15), row 4 + k their values 16+4k..16+4k+3 (the
//         layout's chunk order, so no transpose); v0 = fp32(d)·scale, v1 = -(fp32(dmin)·min).
//   Q6_K: b[0, 256) and b[256, 512): the B tiles of TDPBSSD for values 0..15 and 16..31 (4 rows of
//         64 bytes each, values q - 32 as int8); v0, v1 = fp32(d)·scale of each half.
struct alignas(64) SliceRecord {
  uint8_t b[512];
  float v0[kRows];
  float v1[kRows];
};
static_assert(sizeof(SliceRecord) == 640);

// Each thread's unpacked group, grown to the widest product it has seen (in / 32 records:
// 190 KiB at 9728 values, within L2).
struct ThreadRecords {
  SliceRecord* records = nullptr;
  int64_t capacity = 0;
  ThreadRecords() = default;
  ThreadRecords(const ThreadRecords&) = delete;
  ThreadRecords& operator=(const ThreadRecords&) = delete;
  ~ThreadRecords() { std::free(records); }
  SliceRecord* get(int64_t n) {
    if (n > capacity) {
      std::free(records);
      records = static_cast<SliceRecord*>(std::aligned_alloc(64, static_cast<size_t>(n) * sizeof(SliceRecord)));
      capacity = records ? n : 0;
      if (!records) std::abort();  // out of memory in a kernel: nothing sensible to throw from here
    }
    return records;
  }
};
thread_local ThreadRecords thread_records;

// The tile configuration LDTILECFG reads (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);

// Tiles: 0 and 1 the int32 sums (16 tokens x 16 rows; Q6_K: halves 0..15 and 16..31), 2 and 3 the
// activations (16 tokens x 32 values; Q6_K: 16 values each), 4 and 5 the weights (Q4_K: 4 only).
void configure_tiles(DType t) {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.palette_id = 1;
  const bool q6 = t == DType::Q6_K;
  for (int i = 0; i < 2; ++i) {
    cfg.rows[i] = kAmxTokens;
    cfg.colsb[i] = 4 * kRows;
    cfg.rows[2 + i] = kAmxTokens;
    cfg.colsb[2 + i] = q6 ? 16 : 32;
    cfg.rows[4 + i] = q6 ? 4 : 8;
    cfg.colsb[4 + i] = 4 * kRows;
  }
  // GCC 12's _tile_loadconfig tells the compiler it reads only 8 of the 64 bytes: without this
  // barrier the stores of the rest may be dropped as dead (bench/amx_tiles.cpp got an all-zero
  // configuration that way, and SIGILL at its first tile load).
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// One group's Q4_K slices as records (scales formed as q4_k_group in stored_matmul_avx512.cpp does).
void unpack_q4_k(const uint8_t* group, int64_t n_slices, SliceRecord* rec) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int32_t>(0x80000000u));
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < n_slices; b += 8, group += kInterleavedQ4KBytes * kRows) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 2 * kRows)));
    for (int j = 0; j < 8; ++j) {
      const uint8_t* slice = group + 4 * kRows + 18 * kRows * j;
      SliceRecord& r = rec[b + j];
      _mm512_store_ps(r.v0, _mm512_mul_ps(d, bytes_as_float(slice)));
      _mm512_store_ps(r.v1, _mm512_castsi512_ps(_mm512_xor_si512(
                                _mm512_castps_si512(_mm512_mul_ps(dmin, bytes_as_float(slice + kRows))), sign)));
      const uint8_t* chunks = slice + 2 * kRows;
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i chunk = _mm512_loadu_si512(chunks + 4 * kRows * k);
        _mm512_store_si512(r.b + 64 * k, _mm512_and_si512(chunk, low4));
        _mm512_store_si512(r.b + 64 * (4 + k), _mm512_and_si512(_mm512_srli_epi16(chunk, 4), low4));
      }
    }
  }
}

// One group's Q6_K slices as records (values as q6_k_group forms them, less 32).
void unpack_q6_k(const uint8_t* group, int64_t n_slices, SliceRecord* rec) {
  const __m512i bias = _mm512_set1_epi8(32);
  for (int64_t b = 0; b < n_slices; b += 8, group += kInterleavedQ6KBytes * kRows) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group)));
    for (int j = 0; j < 8; ++j) {
      const uint8_t* slice = group + 2 * kRows + 26 * kRows * j;
      SliceRecord& r = rec[b + j];
      _mm512_store_ps(r.v0, _mm512_mul_ps(d, int8s_as_float(slice)));
      _mm512_store_ps(r.v1, _mm512_mul_ps(d, int8s_as_float(slice + kRows)));
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        __m512i low, high;
        q6_k_chunk_values(slice, k, &low, &high);
        _mm512_store_si512(r.b + 64 * k, _mm512_sub_epi8(low, bias));
        _mm512_store_si512(r.b + 256 + 64 * k, _mm512_sub_epi8(high, bias));
      }
    }
  }
}

// Token t's chain as q4_k_group forms it: acc = fma(v0·d_act, sum, acc).
inline void q4_k_accumulate(const SliceRecord& rec, const AmxActivationSlice& act, const int32_t (*sums)[kRows],
                            __m512* acc) {
  const __m512 scale = _mm512_load_ps(rec.v0);
#pragma GCC unroll 16
  for (int t = 0; t < kAmxTokens; ++t) {
    const __m512 dd = _mm512_mul_ps(scale, _mm512_set1_ps(act.d[t]));
    acc[t] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(_mm512_load_si512(sums[t])), acc[t]);
  }
}

// 16 tokens (act: their slices in order) against one unpacked Q4_K group: per slice the tile's
// exact int32 sums into token t's chain; the offsets fma(v1, s_act, offsets) in their own chain;
// total = acc + offsets. (Issuing later slices' tile work ahead of earlier slices' vector work, in
// two sets of tiles, measured no faster: the tile loads and stores do not overlap the vector work.)
void q4_k_tokens(const SliceRecord* rec, int64_t n_slices, const AmxActivationSlice* act, __m512* total) {
  alignas(64) int32_t sums[kAmxTokens][kRows];
  __m512 acc[kAmxTokens];
#pragma GCC unroll 16
  for (int t = 0; t < kAmxTokens; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n_slices; ++s) {
    _tile_loadd(2, act[s].qs, 32);
    _tile_loadd(4, rec[s].b, 64);
    _tile_zero(0);
    _tile_dpbsud(0, 2, 4);
    _tile_stored(0, sums, 64);
    q4_k_accumulate(rec[s], act[s], sums, acc);
  }
  __m512 offsets[kAmxTokens];
#pragma GCC unroll 16
  for (int t = 0; t < kAmxTokens; ++t) offsets[t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n_slices; ++s) {
    const __m512 offset = _mm512_load_ps(rec[s].v1);
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) offsets[t] = _mm512_fmadd_ps(offset, _mm512_set1_ps(act[s].s[t]), offsets[t]);
  }
#pragma GCC unroll 16
  for (int t = 0; t < kAmxTokens; ++t) total[t] = _mm512_add_ps(acc[t], offsets[t]);
}

// The same for Q6_K: two tiles per slice (values 0..15 and 16..31, signed), token t's chain
// acc = fma(v0·d_act, sum_lo, acc), then fma(v1·d_act, sum_hi, acc), as q6_k_group forms it.
void q6_k_tokens(const SliceRecord* rec, int64_t n_slices, const AmxActivationSlice* act, __m512* total) {
  alignas(64) int32_t sums_lo[kAmxTokens][kRows];
  alignas(64) int32_t sums_hi[kAmxTokens][kRows];
  __m512 acc[kAmxTokens];
#pragma GCC unroll 16
  for (int t = 0; t < kAmxTokens; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n_slices; ++s) {
    _tile_loadd(2, act[s].qs, 32);
    _tile_loadd(3, act[s].qs[0] + 16, 32);
    _tile_loadd(4, rec[s].b, 64);
    _tile_loadd(5, rec[s].b + 256, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_dpbssd(0, 2, 4);
    _tile_dpbssd(1, 3, 5);
    _tile_stored(0, sums_lo, 64);
    _tile_stored(1, sums_hi, 64);
    const __m512 scale_lo = _mm512_load_ps(rec[s].v0), scale_hi = _mm512_load_ps(rec[s].v1);
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) {
      const __m512 d_act = _mm512_set1_ps(act[s].d[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(scale_lo, d_act), _mm512_cvtepi32_ps(_mm512_load_si512(sums_lo[t])),
                               acc[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(scale_hi, d_act), _mm512_cvtepi32_ps(_mm512_load_si512(sums_hi[t])),
                               acc[t]);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < kAmxTokens; ++t) total[t] = acc[t];
}

}  // namespace

bool stored_matmul_amx_available() {
  static const bool ok = [] {
    if (const char* env = std::getenv("TQSERVE_AMX"); env && std::strcmp(env, "0") == 0) return false;
    if (!stored_matmul_avx512_available()) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    constexpr unsigned kAmxTile = 1u << 24, kAmxInt8 = 1u << 25;
    if ((edx & kAmxTile) == 0 || (edx & kAmxInt8) == 0) return false;
    // Linux hands out the 8 KiB tile state only on request (per process, for all its threads).
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtileData = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
  }();
  return ok;
}

void pack_activations_for_amx(const ActivationBlock* act, int64_t n_tokens, int64_t n_slices,
                              AmxActivationSlice* packed) {
#pragma omp parallel for schedule(static) if (n_tokens * n_slices >= 4096)
  for (int64_t block = 0; block < n_tokens / kAmxTokens; ++block)
    for (int64_t s = 0; s < n_slices; ++s) {
      AmxActivationSlice& p = packed[block * n_slices + s];
      for (int t = 0; t < kAmxTokens; ++t) {
        const ActivationBlock& a = act[(block * kAmxTokens + t) * n_slices + s];
        std::memcpy(p.qs[t], a.qs, sizeof a.qs);
        p.d[t] = a.d;
        p.s[t] = a.s;
      }
    }
}

void linear_interleaved16_amx_groups(DType t, const AmxActivationSlice* packed, int64_t n_tiled,
                                     const ActivationBlock* tail_act, const int32_t* tail_sums, int64_t n_tail,
                                     int64_t n_slices, const uint8_t* w, int64_t out, const float* bias, float* y,
                                     int64_t g_begin, int64_t g_end) {
  const bool q6 = t == DType::Q6_K;
  const size_t block_bytes = (q6 ? kInterleavedQ6KBytes : kInterleavedQ4KBytes) * kRows;  // per 8 slices
  SliceRecord* rec = thread_records.get(n_slices);
  configure_tiles(t);
  // Chunks of at most 512 tokens, as even as whole tiles allow, each walked through every group of
  // the range before the next: their packed activations (1.6 MiB at 2560 values) stay in L2, where
  // a 2048-token serving step streamed them from L3 for each group (139 against 133 ms for the step's
  // 2560 x 9728 product). A group is unpacked again for each chunk.
  const int64_t tiles = n_tiled / kAmxTokens, n_chunks = (n_tiled + 511) / 512;
  const int64_t chunk_tiles = n_chunks > 0 ? (tiles + n_chunks - 1) / n_chunks : 0;
  for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
    const int64_t first = chunk * chunk_tiles * kAmxTokens;
    const int64_t last = first + chunk_tiles * kAmxTokens < n_tiled ? first + chunk_tiles * kAmxTokens : n_tiled;
    const bool last_chunk = chunk + 1 == n_chunks;
    for (int64_t g = g_begin; g < g_end; ++g) {
      const uint8_t* group = w + static_cast<size_t>(g) * static_cast<size_t>(n_slices / 8) * block_bytes;
      if (q6)
        unpack_q6_k(group, n_slices, rec);
      else
        unpack_q4_k(group, n_slices, rec);
      const int64_t o0 = g * kRows, rows = out - o0 < kRows ? out - o0 : kRows;
      const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);  // the group's rows that exist
      for (int64_t tok = first; tok < last; tok += kAmxTokens) {
        __m512 total[kAmxTokens];
        const AmxActivationSlice* act = packed + tok / kAmxTokens * n_slices;
        if (q6)
          q6_k_tokens(rec, n_slices, act, total);
        else
          q4_k_tokens(rec, n_slices, act, total);
        for (int i = 0; i < kAmxTokens; ++i) {
          const __m512 v = bias ? _mm512_add_ps(total[i], _mm512_maskz_loadu_ps(mask, bias + o0)) : total[i];
          _mm512_mask_storeu_ps(y + (tok + i) * out + o0, mask, v);
        }
      }
      if (last_chunk && n_tail > 0)
        linear_interleaved16_avx512_groups(t, tail_act, tail_sums, n_tail, n_slices, w, out, bias, y + n_tiled * out,
                                           g, g + 1);
    }
  }
  _tile_release();
}

}  // namespace tq
