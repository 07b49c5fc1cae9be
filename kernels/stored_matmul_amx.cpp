// AMX tiles for linear_stored()'s K-quant products (kernels/stored_matmul_amx.h). This file is
// compiled with -mamx-tile -mamx-int8 and the AVX-512 flags (CMakeLists.txt) and called only when
// stored_matmul_amx_available() says the CPU and the kernel allow them. Like
// stored_matmul_avx512.cpp it instantiates no C++ library templates, so no AMX-compiled copy of a
// shared inline function can be picked by the linker for others.
//
// Why tiles: one TDPBSUD multiplies 16 tokens by 16 weight rows over 64 values (16384 products,
// summed exactly in int32) where the VNNI kernel needs 256 dpbusd. The K-quant order
// (dot_k_superblocks_reference) sums a whole 256-value super-block in int32 before any fp32 work,
// so each row's integer scales are folded into its values once per call (scale·q as two byte planes,
// low and high: 16-bit products), the tiles accumulate a super-block in 4 multiplies per plane, and
// the fp32 work is once per super-block instead of once per 32 values. Each weight tile serves two
// blocks of 16 tokens (tiles: 4 sums, 2 activations, 2 weight planes), halving the weight tiles
// loaded; the minima's term is formed on the vector units (bench/amx_tiles.cpp measures each part).

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

// One super-block of a group's 16 rows, unpacked once per call for every block of 16 tokens:
// lo[k], hi[k]: the B tiles of values 64k..64k+63 (16 rows of 64 bytes: tile row i holds values
// 64k+4i..64k+4i+3 of each weight row, one byte each), the low and high bytes of scale·q (Q4_K:
// unsigned, 0..945; Q6_K: signed, -4096..4096, high byte signed); d, dmin as fp32; min_pairs[p]:
// each row's mins of slices 2p (low 16 bits) and 2p + 1 (high 16 bits), for VPDPWSSD (Q4_K).
struct alignas(64) SuperblockRecord {
  uint8_t lo[4][16][64];
  uint8_t hi[4][16][64];
  float d[kRows];
  float dmin[kRows];
  int32_t min_pairs[4][kRows];
};

// Each thread's unpacked group, grown to the widest product it has seen (in / 256 records:
// 318 KiB at 9728 values, within L2).
struct ThreadRecords {
  SuperblockRecord* records = nullptr;
  int64_t capacity = 0;
  ThreadRecords() = default;
  ThreadRecords(const ThreadRecords&) = delete;
  ThreadRecords& operator=(const ThreadRecords&) = delete;
  ~ThreadRecords() { std::free(records); }
  SuperblockRecord* get(int64_t n) {
    if (n > capacity) {
      std::free(records);
      records =
          static_cast<SuperblockRecord*>(std::aligned_alloc(64, static_cast<size_t>(n) * sizeof(SuperblockRecord)));
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

// Tiles, all 16 rows of 64 bytes: 0, 1 the int32 sums of the first block of 16 tokens (low and high
// plane), 2, 3 those of the second, 4 and 5 the two blocks' activations, 6 and 7 the weight planes.
void configure_tiles() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.palette_id = 1;
  for (int i = 0; i < 8; ++i) {
    cfg.rows[i] = kRows;
    cfg.colsb[i] = 64;
  }
  // GCC 12's _tile_loadconfig tells the compiler it reads only 8 of the 64 bytes: without this
  // barrier the stores of the rest may be dropped as dead (bench/amx_tiles.cpp got an all-zero
  // configuration that way, and SIGILL at its first tile load).
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// values (64 bytes: 16 rows x 4 values) times each row's 16-bit scale (scale: one int32 lane per
// row, the scale in both 16-bit halves) as the low and high bytes of the products. kSigned: values
// and scales signed (Q6_K), else unsigned.
template <bool kSigned>
inline void fold_scale(__m512i values, __m512i scale, uint8_t* lo, uint8_t* hi) {
  const __m512i even = kSigned ? _mm512_srai_epi16(_mm512_slli_epi16(values, 8), 8)
                               : _mm512_and_si512(values, _mm512_set1_epi16(0x00FF));
  const __m512i odd = kSigned ? _mm512_srai_epi16(values, 8) : _mm512_srli_epi16(values, 8);
  const __m512i pe = _mm512_mullo_epi16(even, scale), po = _mm512_mullo_epi16(odd, scale);
  _mm512_store_si512(lo, _mm512_or_si512(_mm512_and_si512(pe, _mm512_set1_epi16(0x00FF)), _mm512_slli_epi16(po, 8)));
  _mm512_store_si512(hi, _mm512_or_si512(_mm512_srli_epi16(pe, 8), _mm512_and_si512(po, _mm512_set1_epi16(
                                                                                          static_cast<short>(0xFF00)))));
}

// Each row's scale (an int32 lane, sign-extended) as a 16-bit word, twice per lane.
inline __m512i scale_words(__m512i scale32) {
  return _mm512_or_si512(_mm512_and_si512(scale32, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(scale32, 16));
}

// One group's Q4_K super-blocks as records.
void unpack_q4_k(const uint8_t* group, int64_t n_super, SuperblockRecord* rec) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < n_super; ++b, group += kInterleavedQ4KBytes * kRows) {
    SuperblockRecord& r = rec[b];
    _mm512_store_ps(r.d, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group))));
    _mm512_store_ps(r.dmin, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 2 * kRows))));
    for (int j = 0; j < 8; ++j) {
      const uint8_t* slice = group + 4 * kRows + 18 * kRows * j;
      const __m512i scale = scale_words(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(slice))));
      if (j % 2 == 0) {
        const __m512i even = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(slice + kRows)));
        const __m512i odd =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(slice + 18 * kRows + kRows)));
        _mm512_store_si512(r.min_pairs[j / 2], _mm512_or_si512(even, _mm512_slli_epi32(odd, 16)));
      }
      const uint8_t* chunks = slice + 2 * kRows;
      const int tile = j / 2, row0 = 8 * (j % 2);  // slice j: rows 8(j % 2) .. +7 of tile j / 2
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i chunk = _mm512_loadu_si512(chunks + 4 * kRows * k);
        fold_scale<false>(_mm512_and_si512(chunk, low4), scale, r.lo[tile][row0 + k], r.hi[tile][row0 + k]);
        fold_scale<false>(_mm512_and_si512(_mm512_srli_epi16(chunk, 4), low4), scale, r.lo[tile][row0 + 4 + k],
                          r.hi[tile][row0 + 4 + k]);
      }
    }
  }
}

// One group's Q6_K super-blocks as records (values as q6_k_chunk_values forms them, less 32).
void unpack_q6_k(const uint8_t* group, int64_t n_super, SuperblockRecord* rec) {
  const __m512i bias = _mm512_set1_epi8(32);
  for (int64_t b = 0; b < n_super; ++b, group += kInterleavedQ6KBytes * kRows) {
    SuperblockRecord& r = rec[b];
    _mm512_store_ps(r.d, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group))));
    for (int j = 0; j < 8; ++j) {
      const uint8_t* slice = group + 2 * kRows + 26 * kRows * j;
      const __m512i scale_lo =
          scale_words(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(slice))));
      const __m512i scale_hi =
          scale_words(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(slice + kRows))));
      const int tile = j / 2, row0 = 8 * (j % 2);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        __m512i low, high;
        q6_k_chunk_values(slice, k, &low, &high);
        fold_scale<true>(_mm512_sub_epi8(low, bias), scale_lo, r.lo[tile][row0 + k], r.hi[tile][row0 + k]);
        fold_scale<true>(_mm512_sub_epi8(high, bias), scale_hi, r.lo[tile][row0 + 4 + k], r.hi[tile][row0 + 4 + k]);
      }
    }
  }
}

// Token t's chain after one super-block, as q4_k_group / q6_k_group form it: isum = low + 256·high
// (exact), acc = fma(d·d_act, isum, acc), and for Q4_K acc = fnmadd(dmin·d_act, msum, acc) with the
// minima's sum by VPDPWSSD.
template <bool kMinima>
inline void accumulate_superblock(const SuperblockRecord& rec, const AmxActivationSuperblock& act,
                                  const int32_t (*lo)[kRows], const int32_t (*hi)[kRows], __m512* acc) {
  const __m512 d = _mm512_load_ps(rec.d);
  __m512 dmin = _mm512_setzero_ps();
  __m512i min_pairs[4] = {};  // Q6_K's records leave dmin and min_pairs unwritten
  if constexpr (kMinima) {
    dmin = _mm512_load_ps(rec.dmin);
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) min_pairs[p] = _mm512_load_si512(rec.min_pairs[p]);
  }
#pragma GCC unroll 16
  for (int t = 0; t < kAmxTokens; ++t) {
    const __m512i isum = _mm512_add_epi32(_mm512_load_si512(lo[t]), _mm512_slli_epi32(_mm512_load_si512(hi[t]), 8));
    const __m512 d_act = _mm512_set1_ps(act.d[t]);
    acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, d_act), _mm512_cvtepi32_ps(isum), acc[t]);
    if (kMinima) {
      __m512i msum = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) msum = _mm512_dpwssd_epi32(msum, min_pairs[p], _mm512_set1_epi32(act.sum_pairs[t][p]));
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, d_act), _mm512_cvtepi32_ps(msum), acc[t]);
    }
  }
}

// kBlocks (1 or 2) blocks of 16 tokens (act[h]: block h's super-blocks in order) against one
// unpacked group: per super-block the tiles' exact sums of both planes, then each token's chain.
// kSignedHigh: Q6_K's high plane is signed (TDPBSSD).
template <int kBlocks, bool kSignedHigh>
void tokens(const SuperblockRecord* rec, int64_t n_super, const AmxActivationSuperblock* const* act,
            __m512 (*total)[kAmxTokens]) {
  alignas(64) int32_t sums[2 * kBlocks][kAmxTokens][kRows];  // block h: 2h low plane, 2h + 1 high
  __m512 acc[kBlocks][kAmxTokens];
  for (int h = 0; h < kBlocks; ++h)
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) acc[h][t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_super; ++b) {
    _tile_zero(0);
    _tile_zero(1);
    if (kBlocks == 2) {
      _tile_zero(2);
      _tile_zero(3);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      _tile_loadd(4, act[0][b].qs[k], 64);
      _tile_loadd(6, rec[b].lo[k], 64);
      _tile_dpbsud(0, 4, 6);
      _tile_loadd(7, rec[b].hi[k], 64);
      if (kSignedHigh)
        _tile_dpbssd(1, 4, 7);
      else
        _tile_dpbsud(1, 4, 7);
      if (kBlocks == 2) {
        _tile_loadd(5, act[1][b].qs[k], 64);
        _tile_dpbsud(2, 5, 6);
        if (kSignedHigh)
          _tile_dpbssd(3, 5, 7);
        else
          _tile_dpbsud(3, 5, 7);
      }
    }
    _tile_stored(0, sums[0], 64);
    _tile_stored(1, sums[1], 64);
    if (kBlocks == 2) {
      _tile_stored(2, sums[2], 64);
      _tile_stored(3, sums[3], 64);
    }
    for (int h = 0; h < kBlocks; ++h) accumulate_superblock<!kSignedHigh>(rec[b], act[h][b], sums[2 * h], sums[2 * h + 1], acc[h]);
  }
  for (int h = 0; h < kBlocks; ++h)
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) total[h][t] = acc[h][t];
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

void pack_superblock_activations_for_amx(const SuperblockActivation* act, int64_t n_tokens, int64_t n_super,
                                         AmxActivationSuperblock* packed) {
#pragma omp parallel for schedule(static) if (n_tokens * n_super >= 512)
  for (int64_t block = 0; block < n_tokens / kAmxTokens; ++block)
    for (int64_t b = 0; b < n_super; ++b) {
      AmxActivationSuperblock& p = packed[block * n_super + b];
      for (int t = 0; t < kAmxTokens; ++t) {
        const SuperblockActivation& a = act[(block * kAmxTokens + t) * n_super + b];
        for (int k = 0; k < 4; ++k) std::memcpy(p.qs[k][t], a.qs + 64 * k, 64);
        p.d[t] = a.d;
        for (int q = 0; q < 4; ++q) {
          const int32_t even = a.sums[4 * q] + a.sums[4 * q + 1], odd = a.sums[4 * q + 2] + a.sums[4 * q + 3];
          p.sum_pairs[t][q] = (even & 0xFFFF) | static_cast<int32_t>(static_cast<uint32_t>(odd) << 16);
        }
      }
    }
}

void linear_interleaved16_amx_groups(DType t, const AmxActivationSuperblock* packed, int64_t n_tiled,
                                     const SuperblockActivation* tail_act, int64_t n_tail, int64_t n_super,
                                     const uint8_t* w, int64_t out, const float* bias, float* y, int64_t g_begin,
                                     int64_t g_end) {
  const bool q6 = t == DType::Q6_K;
  const size_t block_bytes = (q6 ? kInterleavedQ6KBytes : kInterleavedQ4KBytes) * kRows;  // per super-block
  SuperblockRecord* rec = thread_records.get(n_super);
  configure_tiles();
  // Chunks of at most 512 tokens, as even as whole tiles allow, each walked through every group of
  // the range before the next: their packed activations (1.4 MiB at 2560 values) stay in L2, where
  // a 2048-token serving step streamed them from L3 for each group. A group is unpacked again for
  // each chunk.
  const int64_t tiles = n_tiled / kAmxTokens, n_chunks = (n_tiled + 511) / 512;
  const int64_t chunk_tiles = n_chunks > 0 ? (tiles + n_chunks - 1) / n_chunks : 0;
  for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
    const int64_t first = chunk * chunk_tiles, last = first + chunk_tiles < tiles ? first + chunk_tiles : tiles;
    const bool last_chunk = chunk + 1 == n_chunks;
    for (int64_t g = g_begin; g < g_end; ++g) {
      const uint8_t* group = w + static_cast<size_t>(g) * static_cast<size_t>(n_super) * block_bytes;
      if (q6)
        unpack_q6_k(group, n_super, rec);
      else
        unpack_q4_k(group, n_super, rec);
      const int64_t o0 = g * kRows, rows = out - o0 < kRows ? out - o0 : kRows;
      const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);  // the group's rows that exist
      const __m512 row_bias = bias ? _mm512_maskz_loadu_ps(mask, bias + o0) : _mm512_setzero_ps();
      for (int64_t tile = first; tile < last;) {
        const int blocks = tile + 1 < last ? 2 : 1;
        const AmxActivationSuperblock* act[2] = {packed + tile * n_super,
                                                 packed + (tile + blocks - 1) * n_super};
        __m512 total[2][kAmxTokens];
        if (blocks == 2)
          q6 ? tokens<2, true>(rec, n_super, act, total) : tokens<2, false>(rec, n_super, act, total);
        else
          q6 ? tokens<1, true>(rec, n_super, act, total) : tokens<1, false>(rec, n_super, act, total);
        for (int h = 0; h < blocks; ++h)
          for (int i = 0; i < kAmxTokens; ++i) {
            const __m512 v = bias ? _mm512_add_ps(total[h][i], row_bias) : total[h][i];
            _mm512_mask_storeu_ps(y + ((tile + h) * kAmxTokens + i) * out + o0, mask, v);
          }
        tile += blocks;
      }
      if (last_chunk && n_tail > 0)
        linear_interleaved16_k_avx512_groups(t, tail_act, n_tail, n_super, w, out, bias, y + n_tiled * out, g, g + 1);
    }
  }
  _tile_release();
}

}  // namespace tq
