// Where the AMX kernel's time goes (kernels/stored_matmul_amx.cpp, docs/BENCHMARKS.md session 23):
// one 32-value slice of 16 tokens x 16 weight rows, as the kernel does it, in three parts timed
// apart and together: the tile work (load activations and weights, zero, multiply, store the
// 16 x 16 int32 sums), the fp32 work the K-quant order prescribes per slice (per token: convert
// the sums, scale, fma into the token's chain), and both. If the two overlapped, "both" would cost
// the larger of the two; it costs about their sum. Skips on CPUs without AMX.
// superblock_* time the alternative llama.cpp's K-quant arithmetic allows (activations with one
// scale per 256 values): the slices' integer scales folded into the weights as two bytes (low,
// high), so the tiles accumulate a whole 256-value superblock in int32 (K = 64 per multiply, 4 per
// byte plane, 4 more for the minima's term) and the fp32 work is once per superblock, not per
// slice. Compare its ns_per_slice (per 32 values, 8 per superblock) with "both".
// superblock_pair_* is what kernels/stored_matmul_amx.cpp now does (session 25): each weight tile
// serves two blocks of 16 tokens, the minima's term on the vector units; /weights_in_l1 and
// /weights_8k keep the weight tiles in L1 (measured: hardly faster, so L2 reads do not bind it).
//   build/bench_amx_tiles
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/stored_matmul_amx.h"

namespace {

// 512 slices: 0.5 MiB of activations and weights (1 MiB in the superblock form), in L2 as the
// kernel keeps a group's unpacked weights and a chunk's packed activations.
constexpr int kSlices = 512;

struct alignas(64) Data {
  int8_t act[kSlices][16][32];
  uint8_t weights[kSlices][8][64];
  int32_t sums[4][16][16];
  float d[16];
};

// Pseudo-random bytes (the tiles' timing does not depend on the values).
void fill_bytes(void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  uint32_t state = 12345;
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>((state = state * 1664525u + 1013904223u) >> 24);
}

struct alignas(64) TileConfig {
  uint8_t palette_id, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

__attribute__((target("amx-tile,amx-int8"))) void configure() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.palette_id = 1;
  cfg.rows[0] = 16, cfg.colsb[0] = 64;  // sums
  cfg.rows[2] = 16, cfg.colsb[2] = 32;  // activations
  cfg.rows[4] = 8, cfg.colsb[4] = 64;   // weights
  // GCC 12's _tile_loadconfig tells the compiler it reads 8 of the 64 bytes: without this barrier
  // the stores of the rest may be dropped as dead (an all-zero configuration, then SIGILL).
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

__attribute__((target("amx-tile,amx-int8"))) inline void tile_work(Data& x, int s) {
  _tile_loadd(2, x.act[s], 32);
  _tile_loadd(4, x.weights[s], 64);
  _tile_zero(0);
  _tile_dpbsud(0, 2, 4);
  _tile_stored(0, x.sums[s & 3], 64);
}

__attribute__((target("avx512f"))) inline void fp32_work(const Data& x, int s, __m512* acc) {
  const __m512 scale = _mm512_set1_ps(1.0001f);
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t) {
    const __m512 dd = _mm512_mul_ps(scale, _mm512_set1_ps(x.d[t]));
    acc[t] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(_mm512_load_si512(x.sums[(s + 2) & 3][t])), acc[t]);
  }
}

template <bool kTiles, bool kFp32>
__attribute__((target("amx-tile,amx-int8,avx512f"))) void BM_slice(benchmark::State& state) {
  if (!tq::stored_matmul_amx_available()) {
    state.SkipWithError("no AMX on this CPU (or TQSERVE_AMX=0)");
    return;
  }
  static Data x;
  fill_bytes(&x, sizeof x);  // written, so the reads come from memory (not the kernel's zero page)
  for (float& v : x.d) v = 0.5f;
  configure();
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (auto _ : state)
    for (int s = 0; s < kSlices; ++s) {
      if constexpr (kTiles) tile_work(x, s);
      if constexpr (kFp32) fp32_work(x, s, acc);
    }
  benchmark::DoNotOptimize(acc);
  _tile_release();
  state.counters["ns_per_slice"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * kSlices,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

constexpr int kSuperblocks = kSlices / 8;  // the same values, 256 at a time

struct alignas(64) SuperData {
  int8_t act[kSuperblocks][4][16][64];       // 16 tokens x 64 values, 4 per superblock
  uint8_t planes[kSuperblocks][3][4][16][64];  // low byte, high byte, minima: 4 tiles of K = 64 each
  int32_t sums[2][3][16][16];
  float d[16];
};

__attribute__((target("amx-tile,amx-int8"))) void configure_superblock() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.palette_id = 1;
  for (int c = 0; c < 3; ++c) cfg.rows[c] = 16, cfg.colsb[c] = 64;  // sums: low, high, minima
  cfg.rows[3] = 16, cfg.colsb[3] = 64;                               // activations, K = 64
  for (int b = 4; b < 7; ++b) cfg.rows[b] = 16, cfg.colsb[b] = 64;   // the three weight planes
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

__attribute__((target("amx-tile,amx-int8"))) inline void superblock_tiles(SuperData& x, int b) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    _tile_loadd(3, x.act[b][k], 64);
    _tile_loadd(4, x.planes[b][0][k], 64);
    _tile_loadd(5, x.planes[b][1][k], 64);
    _tile_loadd(6, x.planes[b][2][k], 64);
    _tile_dpbsud(0, 3, 4);
    _tile_dpbsud(1, 3, 5);
    _tile_dpbsud(2, 3, 6);
  }
  _tile_stored(0, x.sums[b & 1][0], 64);
  _tile_stored(1, x.sums[b & 1][1], 64);
  _tile_stored(2, x.sums[b & 1][2], 64);
}

// Per token: sum = low + 256 high, acc = fma(d_w d_act, sum, acc) - (dmin_w d_act) minima.
__attribute__((target("avx512f"))) inline void superblock_fp32(const SuperData& x, int b, __m512* acc) {
  const __m512 scale = _mm512_set1_ps(1.0001f), min_scale = _mm512_set1_ps(0.9999f);
  const auto& s = x.sums[(b + 1) & 1];
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t) {
    const __m512i sum = _mm512_add_epi32(_mm512_load_si512(s[0][t]), _mm512_slli_epi32(_mm512_load_si512(s[1][t]), 8));
    const __m512 d_act = _mm512_set1_ps(x.d[t]);
    acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(scale, d_act), _mm512_cvtepi32_ps(sum), acc[t]);
    acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(min_scale, d_act), _mm512_cvtepi32_ps(_mm512_load_si512(s[2][t])), acc[t]);
  }
}

template <bool kTiles, bool kFp32>
__attribute__((target("amx-tile,amx-int8,avx512f"))) void BM_superblock(benchmark::State& state) {
  if (!tq::stored_matmul_amx_available()) {
    state.SkipWithError("no AMX on this CPU (or TQSERVE_AMX=0)");
    return;
  }
  static SuperData x;
  fill_bytes(&x, sizeof x);
  for (float& v : x.d) v = 0.5f;
  configure_superblock();
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (auto _ : state)
    for (int b = 0; b < kSuperblocks; ++b) {
      if constexpr (kTiles) superblock_tiles(x, b);
      if constexpr (kFp32) superblock_fp32(x, b, acc);
    }
  benchmark::DoNotOptimize(acc);
  _tile_release();
  state.counters["ns_per_slice"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * kSuperblocks * 8,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}


// superblock_pair_* keep each weight tile for two blocks of 16 tokens (tiles: 4 sums, 2
// activations, 2 weight planes), halving the weight tiles loaded per product, and form the minima's
// term on the vector units from the activations' per-slice sums (int16, as Q8_K keeps them) and the
// weights' slice minima (int16 pairs, VPDPWSSD), so no minima plane is loaded. ns_per_slice counts
// 32 values of 16 tokens, as above.
struct alignas(64) PairData {
  int8_t act[kSuperblocks][2][4][16][64];        // two token blocks, 4 tiles of K = 64 each
  uint8_t planes[kSuperblocks][2][4][16][64];    // low byte, high byte
  int16_t mins[kSuperblocks][4][16][2];          // slice minima, pairs of slices per weight row
  int16_t bsums[kSuperblocks][2][16][8];         // per token, its 8 slices' activation sums
  int32_t sums[2][4][16][16];
  float d[32];
};

__attribute__((target("amx-tile,amx-int8"))) void configure_pair() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.palette_id = 1;
  for (int c = 0; c < 8; ++c) cfg.rows[c] = 16, cfg.colsb[c] = 64;  // 0-3 sums, 4-5 activations, 6-7 weights
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

template <int kWeightSuperblocks>
__attribute__((target("amx-tile,amx-int8"))) inline void pair_tiles(PairData& x, int b) {
  const int wb = b % kWeightSuperblocks;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    _tile_loadd(4, x.act[b][0][k], 64);
    _tile_loadd(6, x.planes[wb][0][k], 64);
    _tile_dpbsud(0, 4, 6);
    _tile_loadd(7, x.planes[wb][1][k], 64);
    _tile_dpbsud(1, 4, 7);
    _tile_loadd(5, x.act[b][1][k], 64);
    _tile_dpbsud(2, 5, 6);
    _tile_dpbsud(3, 5, 7);
  }
  _tile_stored(0, x.sums[b & 1][0], 64);
  _tile_stored(1, x.sums[b & 1][1], 64);
  _tile_stored(2, x.sums[b & 1][2], 64);
  _tile_stored(3, x.sums[b & 1][3], 64);
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void pair_fp32(const PairData& x, int b, __m512* acc) {
  const __m512 scale = _mm512_set1_ps(1.0001f), min_scale = _mm512_set1_ps(0.9999f);
  const int pb = (b + 1) & 1;
  __m512i mins[4];
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) mins[p] = _mm512_load_si512(x.mins[b][p]);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h)
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) {
      const int32_t* bs = reinterpret_cast<const int32_t*>(x.bsums[b][h][t]);
      __m512i m = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) m = _mm512_dpwssd_epi32(m, mins[p], _mm512_set1_epi32(bs[p]));
      const __m512i sum = _mm512_add_epi32(_mm512_load_si512(x.sums[pb][2 * h][t]),
                                           _mm512_slli_epi32(_mm512_load_si512(x.sums[pb][2 * h + 1][t]), 8));
      const __m512 d_act = _mm512_set1_ps(x.d[16 * h + t]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(scale, d_act), _mm512_cvtepi32_ps(sum), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(min_scale, d_act), _mm512_cvtepi32_ps(m), acc[t]);
    }
}

template <bool kTiles, bool kFp32, int kWeightSuperblocks = kSuperblocks>
__attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vnni"))) void BM_pair(benchmark::State& state) {
  if (!tq::stored_matmul_amx_available()) {
    state.SkipWithError("no AMX on this CPU (or TQSERVE_AMX=0)");
    return;
  }
  static PairData x;
  fill_bytes(&x, sizeof x);
  for (float& v : x.d) v = 0.5f;
  configure_pair();
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (auto _ : state)
    for (int b = 0; b < kSuperblocks; ++b) {
      if constexpr (kTiles) pair_tiles<kWeightSuperblocks>(x, b);
      if constexpr (kFp32) pair_fp32(x, b, acc);
    }
  benchmark::DoNotOptimize(acc);
  _tile_release();
  state.counters["ns_per_slice"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * kSuperblocks * 8 * 2,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK(BM_slice<true, false>)->Name("tile_work");
BENCHMARK(BM_slice<false, true>)->Name("fp32_work");
BENCHMARK(BM_slice<true, true>)->Name("both");
BENCHMARK(BM_superblock<true, false>)->Name("superblock_tile_work");
BENCHMARK(BM_superblock<false, true>)->Name("superblock_fp32_work");
BENCHMARK(BM_superblock<true, true>)->Name("superblock_both");
BENCHMARK(BM_pair<true, false>)->Name("superblock_pair_tile_work");
BENCHMARK(BM_pair<false, true>)->Name("superblock_pair_fp32_work");
BENCHMARK(BM_pair<true, true>)->Name("superblock_pair_both");
BENCHMARK(BM_pair<true, false, 4>)->Name("superblock_pair_tile_work/weights_in_l1");
BENCHMARK(BM_pair<true, true, 4>)->Name("superblock_pair_both/weights_in_l1");
BENCHMARK(BM_pair<true, false, 1>)->Name("superblock_pair_tile_work/weights_8k");
BENCHMARK(BM_pair<true, true, 1>)->Name("superblock_pair_both/weights_8k");

}  // namespace

BENCHMARK_MAIN();
