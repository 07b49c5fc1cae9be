// Memory read bandwidth of this machine (a STREAM-like kernel, Google Benchmark): every thread
// sums its share of a 1 GiB array, far larger than any cache, so each byte comes from DRAM.
// bench/compare divides the bytes a decode step must read by this figure for the roofline.
//   build/bench_memory_bandwidth [--benchmark_format=json]
#include <benchmark/benchmark.h>
#include <omp.h>

#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

namespace {

// Four independent vector sums, so the adds never wait on each other: the loads set the pace.
__attribute__((target("avx2"))) double sum_range(const float* p, size_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(p + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(p + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(p + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(p + i + 24));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  double total = 0;
  for (float x : lanes) total += x;
  for (; i < n; ++i) total += p[i];
  return total;
}

constexpr size_t kBytes = size_t(1) << 30;

void BM_read(benchmark::State& state) {
  const size_t n = kBytes / sizeof(float);
  std::vector<float> a(n);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) a[i] = float(i & 1023);  // first touch by the reading thread
  double sink = 0;
  for (auto _ : state) {
    double total = 0;
#pragma omp parallel reduction(+ : total)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const size_t begin = n / 8 / nt * t * 8, end = t + 1 == nt ? n : n / 8 / nt * (t + 1) * 8;
      total += sum_range(a.data() + begin, end - begin);
    }
    sink += total;
  }
  benchmark::DoNotOptimize(sink);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kBytes));
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_read)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
