// Decode attention on the GPU over a paged cache, f16 rows and 4-bit TurboQuant rows with an fp16
// scale (the tq4 preset's tq4h rows, 66 bytes for head_dim 128): one layer with Qwen3-14B's heads
// (40 query, 8 KV, head_dim 128), one query token per sequence, the sequences' rows in blocks of
// 16 scattered over the pool. Prints one JSON line per mode and shape: median µs of 20 timed
// launches (CUDA events, after 3 warm-ups) and the bandwidth of the K and V bytes each launch must
// read.
//   bench_cuda_attention [batch:ctx ...]     (default 16:32768 64:8192)
#include <cuda_fp16.h>

#include <algorithm>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_array.h"
#include "kernels/cuda/paged_attention.h"

namespace {

using tq::cuda::DeviceArray;

// Values in [-1, 1) from a hash of the index: the same pages every run, no host transfer.
__global__ void fill_pages(__half* pages, size_t n, uint32_t salt) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ salt;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    pages[i] = __float2half(float(h & 0xffff) / 32768.0f - 1.0f);
  }
}

// Every row of the tq4h pages gets a valid fp16 scale (the code bytes stay as filled).
__global__ void set_tq4_scales(uint8_t* pages, size_t rows, int row_bytes, int codes_bytes) {
  for (size_t r = size_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += size_t(gridDim.x) * blockDim.x)
    *reinterpret_cast<__half*>(pages + r * row_bytes + codes_bytes) = __float2half(0.05f + 0.001f * float(r % 97));
}

float median_us(const std::function<void()>& launch) {
  cudaEvent_t start, stop;
  tq::cuda::check(cudaEventCreate(&start), "cudaEventCreate");
  tq::cuda::check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> times;
  for (int i = 0; i < 23; ++i) {
    tq::cuda::check(cudaEventRecord(start), "cudaEventRecord");
    launch();
    tq::cuda::check(cudaEventRecord(stop), "cudaEventRecord");
    tq::cuda::check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    tq::cuda::check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (i >= 3) times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2] * 1e3f;
}

void report(const char* mode, int batch, int ctx, double us, double bytes) {
  std::printf("{\"bench\": \"attention_%s\", \"heads\": \"40/8/128\", \"batch\": %d, \"ctx\": %d, \"us\": %.1f, "
              "\"kv_bytes\": %.0f, \"tb_s\": %.3f}\n",
              mode, batch, ctx, us, bytes, bytes / (us * 1e-6) / 1e12);
  std::fflush(stdout);
}

void run(int batch, int ctx) {
  const int n_q = 40, n_kv = 8, d = 128, bs = 16;
  const int blocks_per_seq = (ctx + bs - 1) / bs, num_blocks = batch * blocks_per_seq;
  const size_t rows = size_t(num_blocks) * n_kv * bs;
  // Each sequence's blocks are a random choice from the pool, as after a while of serving.
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
  std::vector<int32_t> positions(batch, ctx - 1), begin(batch);
  for (int s = 0; s < batch; ++s) begin[s] = s * blocks_per_seq;
  std::vector<float> q(size_t(batch) * n_q * d);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : q) x = normal(rng);
  DeviceArray<int32_t> dpos, dbegin, dtables;
  DeviceArray<float> dq, out(q.size());
  dpos.upload(positions);
  dbegin.upload(begin);
  dtables.upload(ids);
  dq.upload(q);
  const tq::cuda::TokenSlots slots{batch, dpos.data(), dbegin.data(), dtables.data()};
  const float scale = 1.0f / std::sqrt(float(d));
  tq::cuda::AttentionScratch scratch;
  {
    DeviceArray<__half> k(rows * d), v(rows * d);
    fill_pages<<<1024, 256>>>(k.data(), rows * d, 1);
    fill_pages<<<1024, 256>>>(v.data(), rows * d, 2);
    tq::cuda::check_launch("fill_pages");
    const tq::cuda::KvPageShape shape{n_kv, d, bs, tq::cuda::Element::F16};
    const double us = median_us([&] {
      tq::cuda::paged_attention(shape, slots, n_q, ctx, dq.data(), k.data(), v.data(), scale, out.data(), scratch, nullptr);
    });
    report("f16", batch, ctx, us, 2.0 * batch * double(ctx) * n_kv * d * sizeof(__half));
  }
  {
    const tq::cuda::Tq4PageShape shape{n_kv, d, bs, true};
    const int row_bytes = tq::cuda::tq4_row_bytes(shape);
    DeviceArray<uint8_t> k(rows * row_bytes), v(rows * row_bytes);
    // Random code bytes (fill_pages' halves, reinterpreted), then valid scales.
    fill_pages<<<1024, 256>>>(reinterpret_cast<__half*>(k.data()), rows * row_bytes / 2, 3);
    fill_pages<<<1024, 256>>>(reinterpret_cast<__half*>(v.data()), rows * row_bytes / 2, 4);
    set_tq4_scales<<<1024, 256>>>(k.data(), rows, row_bytes, d / 2);
    set_tq4_scales<<<1024, 256>>>(v.data(), rows, row_bytes, d / 2);
    tq::cuda::check_launch("tq4 pages");
    std::vector<float> levels(16);
    for (int i = 0; i < 16; ++i) levels[i] = (float(i) - 7.5f) / 7.5f;
    DeviceArray<float> dlevels;
    dlevels.upload(levels);
    const double us = median_us([&] {
      tq::cuda::tq4_paged_attention(shape, slots, n_q, ctx, dq.data(), k.data(), dlevels.data(), v.data(), dlevels.data(),
                                    scale, out.data(), scratch, nullptr);
    });
    report("tq4h", batch, ctx, us, 2.0 * batch * double(ctx) * n_kv * row_bytes);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::pair<int, int>> shapes;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const auto colon = a.find(':');
      if (colon == std::string::npos) {
        std::fprintf(stderr, "bench_cuda_attention: '%s' is not batch:ctx\n", argv[i]);
        return 2;
      }
      shapes.emplace_back(std::stoi(a.substr(0, colon)), std::stoi(a.substr(colon + 1)));
    }
    if (shapes.empty()) shapes = {{16, 32768}, {64, 8192}};
    std::string why;
    if (tq::cuda::device_count(&why) == 0) {
      std::fprintf(stderr, "bench_cuda_attention: no CUDA device: %s\n", why.c_str());
      return 2;
    }
    for (auto [batch, ctx] : shapes) run(batch, ctx);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
