// fp32 linear layers (Google Benchmark): the engine's batch-invariant kernel (kernels/matmul.h)
// against OpenBLAS sgemm/sgemv, at SmolLM2-135M's shapes (576 -> 1536 MLP up, 1536 -> 576 down,
// 576 -> 49152 vocabulary head) for 1, 16, 64 and 512 tokens, on all cores. Reports GFLOP/s.
//   build/bench_linear_f32 [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/matmul.h"

namespace tq {
namespace {

using LinearFn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, const float*, float*);

void run(benchmark::State& state, LinearFn fn) {
  const int64_t n = state.range(0), in = state.range(1), out = state.range(2);
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n * in), w(out * in), y(n * out);
  for (float& v : x) v = g(rng);
  for (float& v : w) v = g(rng);
  for (auto _ : state) {
    fn(x.data(), n, in, w.data(), out, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(n) * in * out * state.iterations(), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens", "in", "out"});
  for (int64_t n : {1, 16, 64, 512}) {
    b->Args({n, 576, 1536});
    b->Args({n, 1536, 576});
    if (n <= 64) b->Args({n, 576, 49152});
  }
  b->UseRealTime();
}

void BM_invariant(benchmark::State& s) { run(s, linear); }
void BM_openblas(benchmark::State& s) { run(s, linear_openblas); }
BENCHMARK(BM_invariant)->Apply(shapes);
BENCHMARK(BM_openblas)->Apply(shapes);

}  // namespace
}  // namespace tq

BENCHMARK_MAIN();
