// Linear layers over weights as stored (Google Benchmark): kernels/stored_matmul's tiles for
// Q4_1 (SmolLM2's layers; also interleaved, kernels/interleaved_rows.h), Q8_0 (its tied head), Q4_K,
// Q6_K (also interleaved, at Qwen3-4B's shapes) and F16 against the scalar reference
// of the same arithmetic and against the fp32 kernel over the dequantized weights
// (kernels/matmul.h), at SmolLM2-135M's shapes for 1, 16 and 512 tokens, on all cores.
// Reports weight GB/s (bytes of stored weights read per second) and GFLOP/s.
//   build/bench_linear_stored [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/dequantize.h"
#include "kernels/interleaved_rows.h"
#include "kernels/matmul.h"
#include "kernels/stored_matmul.h"

namespace tq {
namespace {

// Random rows of `t` with sane fp16 scales: the stored bytes are otherwise random.
std::vector<uint8_t> random_weights(DType t, int64_t out, int64_t in) {
  std::mt19937 rng(3);
  std::vector<uint8_t> w(out * dtype_row_bytes(t, in));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
  const uint16_t scale = fp32_to_fp16(0.01f);
  const int block_bytes = dtype_traits(t).block_bytes;
  if (t == DType::F16) {
    for (size_t i = 0; i < w.size(); i += 2) w[i + 1] &= 0x3B;  // finite values below 1
    return w;
  }
  const int scale_at = t == DType::Q6_K ? 208 : 0;
  for (size_t off = 0; off < w.size(); off += block_bytes) std::memcpy(&w[off + scale_at], &scale, 2);
  return w;
}

enum class Kernel { Stored, Interleaved, Reference, DequantizedF32 };

void run(benchmark::State& state, DType t, Kernel kernel) {
  const int64_t n = state.range(0), in = state.range(1), out = state.range(2);
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n * in);
  LargeFloats y(n * out);  // as the engine's ForwardBuffers hold a product's output
  for (float& v : x) v = g(rng);
  const std::vector<uint8_t> w = random_weights(t, out, in);
  std::vector<float> w32;
  if (kernel == Kernel::DequantizedF32) {
    w32.resize(out * in);
    dequantize_row(t, w.data(), w32.data(), out * in);
  }
  LargeBytes grouped;
  const int group_rows = interleaved_group_rows(t);  // this CPU's layout
  if (kernel == Kernel::Interleaved) grouped = interleave_rows(t, w.data(), out, in, group_rows);
  const StoredProduct interleaved{t, grouped.data(), out, nullptr, y.data(), group_rows};
  for (auto _ : state) {
    switch (kernel) {
      case Kernel::Interleaved: linear_stored_many(x.data(), n, in, &interleaved, 1); break;
      case Kernel::Stored: linear_stored(x.data(), n, in, t, w.data(), out, nullptr, y.data()); break;
      case Kernel::Reference: linear_stored_reference(x.data(), n, in, t, w.data(), out, nullptr, y.data()); break;
      case Kernel::DequantizedF32: linear(x.data(), n, in, w32.data(), out, nullptr, y.data()); break;
    }
    benchmark::DoNotOptimize(y.data());
  }
  const double weight_bytes = kernel == Kernel::DequantizedF32 ? 4.0 * out * in : double(w.size());
  state.counters["weight_GB/s"] = benchmark::Counter(weight_bytes * state.iterations(), benchmark::Counter::kIsRate,
                                                     benchmark::Counter::kIs1000);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(n) * in * out * state.iterations(),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens", "in", "out"});
  for (int64_t n : {1, 16, 512}) {
    b->Args({n, 768, 1536});  // 768: whole K-quant super-blocks (SmolLM2's 576 is not)
    b->Args({n, 1536, 768});
  }
  b->UseRealTime();
}

void head_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens", "in", "out"});
  b->Args({1, 576, 49152});
  b->UseRealTime();
}

#define TQ_STORED_BENCH(type)                                                                              \
  void BM_stored_##type(benchmark::State& s) { run(s, DType::type, Kernel::Stored); }                      \
  void BM_reference_##type(benchmark::State& s) { run(s, DType::type, Kernel::Reference); }                \
  void BM_dequantized_f32_##type(benchmark::State& s) { run(s, DType::type, Kernel::DequantizedF32); }     \
  BENCHMARK(BM_stored_##type)->Apply(shapes);                                                              \
  BENCHMARK(BM_reference_##type)->Apply(shapes)->Iterations(2);                                            \
  BENCHMARK(BM_dequantized_f32_##type)->Apply(shapes);

TQ_STORED_BENCH(Q4_1)
void BM_interleaved_Q4_1(benchmark::State& s) { run(s, DType::Q4_1, Kernel::Interleaved); }
BENCHMARK(BM_interleaved_Q4_1)->Apply(shapes);
TQ_STORED_BENCH(Q4_K)
TQ_STORED_BENCH(Q6_K)

// Q4_K and Q6_K interleaved 16 rows at a time (AVX-512 VNNI), at Qwen3-4B's shapes: its MLP's up
// projection (14 MB in Q4_K: inside a 32 MiB L3) and its tied LM head (319 MB in Q6_K: from DRAM).
// weight_GB/s counts the bytes as stored in the file.
void qwen3_4b_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens", "in", "out"});
  for (int64_t n : {1, 16, 64, 512, 2048}) b->Args({n, 2560, 9728});  // 64: a batched decode step; 2048: a serving step
  b->Args({1, 2560, 151936});
  b->UseRealTime();
}
void BM_interleaved_Q4_K(benchmark::State& s) { run(s, DType::Q4_K, Kernel::Interleaved); }
void BM_interleaved_Q6_K(benchmark::State& s) { run(s, DType::Q6_K, Kernel::Interleaved); }
void BM_stored_4b_Q4_K(benchmark::State& s) { run(s, DType::Q4_K, Kernel::Stored); }
BENCHMARK(BM_interleaved_Q4_K)->Apply(qwen3_4b_shapes);
BENCHMARK(BM_interleaved_Q6_K)->Apply(qwen3_4b_shapes);
BENCHMARK(BM_stored_4b_Q4_K)->Apply(qwen3_4b_shapes);
TQ_STORED_BENCH(F16)

void BM_stored_head_Q8_0(benchmark::State& s) { run(s, DType::Q8_0, Kernel::Stored); }
void BM_dequantized_f32_head_Q8_0(benchmark::State& s) { run(s, DType::Q8_0, Kernel::DequantizedF32); }
BENCHMARK(BM_stored_head_Q8_0)->Apply(head_shapes);
BENCHMARK(BM_dequantized_f32_head_Q8_0)->Apply(head_shapes);

}  // namespace
}  // namespace tq

BENCHMARK_MAIN();
