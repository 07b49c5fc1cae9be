// Decode attention per KV mode (Google Benchmark): one query token attending over a paged cache of
// 1k, 4k, 16k and 32k positions, head_dim 64 and 128, 32 query / 8 KV heads, one thread.
// Each benchmark reports the KV bytes it reads per second; after the run a table gives every
// mode's time as a speed-up over f16 rows read by the same SIMD kernel (f16/simd), and over the
// engine's FP kernel (f16/fp, what an f16 cache runs today).
//   build/bench_attention_decode [--benchmark_filter=...]
// decode_dram/* attends 512 sequences of 576 positions in turn (~1.2 GiB of f16 pages), as a
// batch-64 serving step does: its reads come from DRAM, not the last-level cache.
// decode_long/* attends one 16k-token sequence across 36 layers as the engine does at batch 1
// (parts of 256 positions on every thread), ~0.6 GB (tq4h) to 2.4 GB (f16) per step, from DRAM.
// Modes ending in +int8k score the keys in integer arithmetic (PagedAttentionArgs::int8_key_scores);
// +int8 also sums the values so (PagedAttentionArgs::int8_value_sums).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/paged_attention.h"
#include "kv/kv_cache.h"

namespace tq {
namespace {

constexpr int kQHeads = 32, kKvHeads = 8, kBlock = 16;

// A cache of `blocks` blocks and `layers` layers in `mode`, K and V alike, Hadamard rotation.
std::unique_ptr<KvCache> layers_cache(const std::string& mode, int d, int blocks, int layers = 1) {
  KvCacheShape shape;
  shape.num_layers = layers;
  shape.num_kv_heads = kKvHeads;
  shape.head_dim = d;
  shape.block_size = kBlock;
  shape.k_dtype = shape.v_dtype = *parse_kv_dtype(mode);
  KvQuantOptions o;
  o.rotation = RotationKind::hadamard;
  return std::make_unique<KvCache>(shape, blocks, o);
}

// A filled cache of one layer and one sequence for (mode, ctx, d), built once per combination.
struct Fixture {
  std::unique_ptr<KvCache> cache;
  BlockTable table;
  std::vector<float> q, q_store, out;
};

Fixture& fixture(const std::string& mode, int ctx, int d) {
  static std::map<std::string, Fixture> all;
  const std::string key = mode + "/" + std::to_string(ctx) + "/" + std::to_string(d);
  auto it = all.find(key);
  if (it != all.end()) return it->second;
  Fixture& f = all[key];
  f.cache = layers_cache(mode, d, ctx / kBlock + 1);
  // Every block, in a scrambled order, as a long-running server's pool hands them out.
  f.table.blocks.resize((ctx + kBlock - 1) / kBlock);
  std::iota(f.table.blocks.begin(), f.table.blocks.end(), 0);
  std::mt19937 rng(ctx + d);
  std::shuffle(f.table.blocks.begin(), f.table.blocks.end(), rng);
  std::normal_distribution<float> normal;
  std::vector<float> k(size_t(kKvHeads) * d), v(k.size());
  for (int t = 0; t < ctx; ++t) {
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    f.cache->write(0, f.table, t, k.data(), v.data());
  }
  f.q.resize(size_t(kQHeads) * d);
  for (float& x : f.q) x = normal(rng);
  f.q_store = f.q;
  f.out.resize(f.q.size());
  return f;
}

void BM_decode_attention(benchmark::State& state, const std::string& mode, bool fp_kernel, bool int8_key_scores,
                         bool int8_value_sums) {
  const int ctx = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  Fixture& f = fixture(mode, ctx, d);
  const KvCache& c = *f.cache;
  const float scale = 1.0f / std::sqrt(float(d));
  for (auto _ : state) {
    if (fp_kernel) {
      PagedAttentionArgs a;
      a.q = f.q.data(), a.n_q_heads = kQHeads, a.n_kv_heads = kKvHeads, a.head_dim = d;
      a.block_table = f.table.blocks.data(), a.block_size = kBlock, a.n_ctx = ctx;
      a.k = c.k_pages(0), a.v = c.v_pages(0), a.scale = scale, a.out = f.out.data();
      paged_attention_exact(a);
    } else {
      // As the engine does: q into K's storage space once per head, output back once per head.
      for (int h = 0; h < kQHeads; ++h) c.k_codec(0).query_to_storage(&f.q[h * d], h / (kQHeads / kKvHeads), &f.q_store[h * d]);
      PagedAttentionArgs a;
      a.q = f.q_store.data(), a.n_q_heads = kQHeads, a.n_kv_heads = kKvHeads, a.head_dim = d;
      a.block_table = f.table.blocks.data(), a.block_size = kBlock, a.n_ctx = ctx;
      a.k = c.k_pages(0), a.v = c.v_pages(0), a.scale = scale, a.out = f.out.data();
      a.int8_key_scores = int8_key_scores;
      a.int8_value_sums = int8_value_sums;
      paged_attention_fast(a);
      for (int h = 0; h < kQHeads; ++h) c.v_codec(0).output_from_storage(&f.out[h * d], h / (kQHeads / kKvHeads), &f.q_store[h * d]);
    }
    benchmark::DoNotOptimize(f.out.data());
  }
  const double bytes = double(ctx) * kKvHeads * (kv_row_bytes(c.shape().k_dtype, d) + kv_row_bytes(c.shape().v_dtype, d));
  state.counters["bytes_per_second"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                                          benchmark::Counter::kIs1024);
  state.counters["bits_per_element"] = kv_bits_per_element(c.shape().k_dtype, d);
}

// Decode attention as a serving step runs it when the batch's caches exceed the last-level cache:
// kDramSequences sequences of `ctx` positions each (Qwen3-1.7B's heads: 16 query, 8 KV, d 128),
// each in its own scrambled blocks of one pool of ~1.2 GiB at ctx 576, attended in turn, so every
// read comes from DRAM. Reports the KV bytes read per second (compare bench_memory_bandwidth).
constexpr int kDramSequences = 512, kDramQHeads = 16;

struct DramFixture {
  std::unique_ptr<KvCache> cache;
  std::vector<BlockTable> tables;  // [kDramSequences]
  std::vector<float> q, out;       // [kDramQHeads * d]
};

DramFixture& dram_fixture(const std::string& mode, int ctx, int d) {
  static std::map<std::string, DramFixture> all;
  const std::string key = mode + "/" + std::to_string(ctx) + "/" + std::to_string(d);
  auto it = all.find(key);
  if (it != all.end()) return it->second;
  DramFixture& f = all[key];
  const int per_seq = (ctx + kBlock - 1) / kBlock;
  f.cache = layers_cache(mode, d, per_seq * kDramSequences);
  std::vector<int> order(size_t(per_seq) * kDramSequences);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(ctx + d);
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> k(size_t(kKvHeads) * d), v(k.size());
  for (float& x : k) x = uniform(rng);
  for (float& x : v) x = uniform(rng);
  f.tables.resize(kDramSequences);
  for (int s = 0; s < kDramSequences; ++s) {
    f.tables[s].blocks.assign(order.begin() + size_t(s) * per_seq, order.begin() + size_t(s + 1) * per_seq);
    for (int t = 0; t < ctx; ++t) {
      k[size_t(t) % k.size()] = uniform(rng);  // rows differ; filling each from scratch took minutes
      f.cache->write(0, f.tables[s], t, k.data(), v.data());
    }
  }
  f.q.resize(size_t(kDramQHeads) * d);
  for (float& x : f.q) x = uniform(rng);
  f.out.resize(f.q.size());
  return f;
}

void BM_decode_attention_dram(benchmark::State& state, const std::string& mode) {
  const int ctx = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  DramFixture& f = dram_fixture(mode, ctx, d);
  const KvCache& c = *f.cache;
  int s = 0;
  for (auto _ : state) {
    PagedAttentionArgs a;
    a.q = f.q.data(), a.n_q_heads = kDramQHeads, a.n_kv_heads = kKvHeads, a.head_dim = d;
    a.block_table = f.tables[s].blocks.data(), a.block_size = kBlock, a.n_ctx = ctx;
    a.k = c.k_pages(0), a.v = c.v_pages(0), a.scale = 1.0f / std::sqrt(float(d)), a.out = f.out.data();
    paged_attention_fast(a);
    benchmark::DoNotOptimize(f.out.data());
    s = (s + 1) % kDramSequences;
  }
  const double bytes = double(ctx) * kKvHeads * (kv_row_bytes(c.shape().k_dtype, d) + kv_row_bytes(c.shape().v_dtype, d));
  state.counters["bytes_per_second"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                                          benchmark::Counter::kIs1024);
}

// Decode attention of one long sequence across a model's layers, as the engine runs it at batch 1
// (model/layer_blocks.cpp attend_parts): per layer, q into K's storage space, then (part of 256
// positions, range of KV heads) work items shared by the threads, each its own kernel call leaving
// the part unnormalized, then the parts combined. The third argument is the KV heads per item: 1,
// or all 8 as the engine takes them at this context on up to 8 threads (model/layer_blocks.cpp
// heads_per_item: 4 on 9-16 threads). kLongLayers layers of Qwen3-4B's heads (32 query, 8 KV,
// d 128) in one cache, so a step's K/V (tq4h and tq4p 0.62 GB, f16 2.4 GB at 16k) come from DRAM, as in
// `tqserve bench decode` at that context. Reports the KV bytes read per second, all threads.
constexpr int kLongLayers = 36, kLongPartRows = 256;

struct LongFixture {
  std::unique_ptr<KvCache> cache;
  BlockTable table;
  std::vector<float> q, q_store, out, part_out, part_max, part_sum;
};

LongFixture& long_fixture(const std::string& mode, int ctx, int d) {
  static std::map<std::string, LongFixture> all;
  const std::string key = mode + "/" + std::to_string(ctx) + "/" + std::to_string(d);
  auto it = all.find(key);
  if (it != all.end()) return it->second;
  LongFixture& f = all[key];
  const int blocks = (ctx + kBlock - 1) / kBlock;
  f.cache = layers_cache(mode, d, blocks, kLongLayers);
  f.table.blocks.resize(blocks);
  std::iota(f.table.blocks.begin(), f.table.blocks.end(), 0);
  std::mt19937 rng(ctx + d);
  std::shuffle(f.table.blocks.begin(), f.table.blocks.end(), rng);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> k(size_t(kKvHeads) * d), v(k.size());
  for (float& x : k) x = uniform(rng);
  for (float& x : v) x = uniform(rng);
  for (int t = 0; t < ctx; ++t) {
    k[size_t(t) % k.size()] = uniform(rng);
    v[size_t(t) % v.size()] = uniform(rng);
    f.cache->write(0, f.table, t, k.data(), v.data());
  }
  // Every other layer holds layer 0's bytes (coding 36 layers' rows would take minutes): the
  // kernel's work does not depend on the values, only the addresses must differ.
  for (int l = 1; l < kLongLayers; ++l)
    for (const bool key_side : {true, false}) {
      const PagedRows from = key_side ? f.cache->k_pages(0) : f.cache->v_pages(0);
      const PagedRows to = key_side ? f.cache->k_pages(l) : f.cache->v_pages(l);
      std::memcpy(const_cast<uint8_t*>(to.base), from.base, from.block_stride * size_t(blocks));
    }
  const int parts = (ctx + kLongPartRows - 1) / kLongPartRows;
  f.q.resize(size_t(kQHeads) * d);
  for (float& x : f.q) x = uniform(rng);
  f.q_store = f.q;
  f.out.resize(f.q.size());
  f.part_out.resize(size_t(parts) * kQHeads * d);
  f.part_max.resize(size_t(parts) * kQHeads);
  f.part_sum.resize(size_t(parts) * kQHeads);
  return f;
}

void BM_decode_long(benchmark::State& state, const std::string& mode, bool int8) {
  const int ctx = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  const int per_item = static_cast<int>(state.range(2));
  LongFixture& f = long_fixture(mode, ctx, d);
  const KvCache& c = *f.cache;
  const int parts = (ctx + kLongPartRows - 1) / kLongPartRows, group = kQHeads / kKvHeads;
  for (auto _ : state) {
    for (int l = 0; l < kLongLayers; ++l) {
      const KvRowCodec& kc = c.k_codec(l);
#pragma omp parallel
      {
#pragma omp for schedule(static)
        for (int g = 0; g < kKvHeads; ++g)
          for (int h = g * group; h < (g + 1) * group; ++h) kc.query_to_storage(&f.q[h * d], g, &f.q_store[h * d]);
#pragma omp for schedule(dynamic)
        for (int item = 0; item < parts * kKvHeads / per_item; ++item) {
          const int part = item / (kKvHeads / per_item), g = item % (kKvHeads / per_item) * per_item;
          PagedAttentionArgs a;
          a.q = f.q_store.data(), a.n_q_heads = kQHeads, a.n_kv_heads = kKvHeads, a.head_dim = d;
          a.block_table = f.table.blocks.data(), a.block_size = kBlock;
          a.k = c.k_pages(l), a.v = c.v_pages(l), a.scale = 1.0f / std::sqrt(float(d));
          a.int8_key_scores = a.int8_value_sums = int8;
          a.ctx_begin = part * kLongPartRows;
          a.n_ctx = std::min(ctx, (part + 1) * kLongPartRows);
          a.kv_head_begin = g, a.kv_head_end = g + per_item;
          a.out = f.part_out.data() + size_t(part) * kQHeads * d;
          a.partial_max = f.part_max.data() + size_t(part) * kQHeads;
          a.partial_sum = f.part_sum.data() + size_t(part) * kQHeads;
          paged_attention_fast(a);
        }
#pragma omp for schedule(static)
        for (int g = 0; g < kKvHeads; ++g) {
          const size_t h0 = size_t(g) * group;
          combine_attention_parts(parts, f.part_out.data() + h0 * d, size_t(kQHeads) * d, f.part_max.data() + h0,
                                  f.part_sum.data() + h0, kQHeads, group, d, f.out.data() + h0 * d);
        }
      }
    }
    benchmark::DoNotOptimize(f.out.data());
  }
  const double bytes = double(kLongLayers) * ctx * kKvHeads *
                       (kv_row_bytes(c.shape().k_dtype, d) + kv_row_bytes(c.shape().v_dtype, d));
  state.counters["bytes_per_second"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                                          benchmark::Counter::kIs1024);
}

// Collects each run's time, then prints the speed-up table.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) times_[r.benchmark_name()] = r.GetAdjustedRealTime();
    ConsoleReporter::ReportRuns(runs);
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nspeed-up over f16 (same SIMD kernel) and over the engine's f16 FP kernel:\n");
    std::printf("%-10s %-12s %12s %10s %10s\n", "mode", "/ctx/d", "time_us", "vs_f16simd", "vs_f16fp");
    for (const auto& [name, t] : times_) {
      // name: decode/<mode>/<ctx>/<d>/...
      const size_t a = name.find('/') + 1, b = name.find('/', a), c = name.find('/', b + 1);
      const std::string mode = name.substr(a, b - a), rest = name.substr(b);
      const std::string shape = name.substr(b, name.find('/', c + 1) - b);
      auto find = [&](const std::string& m) {
        for (const auto& [n, tt] : times_)
          if (n.rfind("decode/" + m + shape, 0) == 0) return tt;
        return 0.0;
      };
      const double simd = find("f16"), fp = find("f16fp");
      std::printf("%-10s %-12s %12.1f %10.2f %10.2f\n", mode.c_str(), shape.c_str(), t, simd > 0 ? simd / t : 0,
                  fp > 0 ? fp / t : 0);
    }
  }

 private:
  std::map<std::string, double> times_;
};

void register_all() {
  // "+int8k": the same cache scored with int8_key_scores (kernels/tq_key_scores.h); "+int8" with
  // int8_value_sums too (kernels/tq_value_sums.h).
  for (const char* mode : {"f16fp", "f16", "q8_0", "q4_0h", "tq4", "tq4h", "tq4+int8k", "tq4h+int8k", "tq4+int8",
                           "tq4h+int8", "tq3h", "tq3h+int8k", "tq3h+int8", "tq2h", "tq2h+int8k", "tq2h+int8",
                           "tq3.5", "tq3", "tq2", "tq4p", "tq4p+int8"}) {
    const std::string m = mode;
    const bool fp = m == "f16fp";
    const size_t plus = m.find("+int8");
    const bool keys = plus != std::string::npos, values = keys && m.substr(plus) == "+int8";
    const std::string dtype = fp ? "f16" : m.substr(0, plus);
    auto* b = benchmark::RegisterBenchmark(("decode/" + m).c_str(), [dtype, fp, keys, values](benchmark::State& s) {
      BM_decode_attention(s, dtype, fp, keys, values);
    });
    for (int ctx : {1024, 4096, 16384, 32768})
      for (int d : {64, 128}) b->Args({ctx, d});
    b->Unit(benchmark::kMicrosecond)->UseRealTime();
  }
  for (const char* mode : {"f16", "tq4h+int8", "tq4p+int8"}) {
    const std::string m = mode;
    const size_t plus = m.find("+int8");
    const bool int8 = plus != std::string::npos;
    benchmark::RegisterBenchmark(("decode_long/" + m).c_str(),
                                 [m, int8, plus](benchmark::State& s) { BM_decode_long(s, m.substr(0, plus), int8); })
        ->Args({16384, 128, 1})
        ->Args({16384, 128, kKvHeads})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  for (const char* mode : {"f16", "q8_0", "tq4"}) {
    const std::string m = mode;
    benchmark::RegisterBenchmark(("decode_dram/" + m).c_str(), [m](benchmark::State& s) { BM_decode_attention_dram(s, m); })
        ->Args({576, 128})
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
}

}  // namespace
}  // namespace tq

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  tq::register_all();
  tq::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
