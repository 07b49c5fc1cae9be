// Where the forward pass runs. The CPU path is Transformer's own; another device plugs in as a
// DeviceForward that Transformer::forward hands every batch to, so the engine, scheduler, block
// pool, prefix cache, sampler and server above it stay as they are (the block tables and the
// positions are the same; only where the pages live changes). The CUDA one is model/cuda/.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/forward_batch.h"
#include "model/weights.h"

namespace tq {

enum class ComputeDevice { Cpu, Cuda };

// "cpu" or "cuda"; fails naming the choices.
ComputeDevice parse_compute_device(const std::string& name);
const char* compute_device_name(ComputeDevice device);

// Empty when `device` can run here; otherwise one line saying why not ("this build has no CUDA
// backend ...", "no CUDA device: ...").
std::string compute_device_unavailable(ComputeDevice device);

// Empty when `device` can hold a cache of `shape`; otherwise one line naming what it cannot hold
// (the CUDA backend keeps f16 or f32 K and V, without windows, so far).
std::string device_cache_unsupported(ComputeDevice device, const KvCacheShape& shape);

class DeviceForward {
 public:
  virtual ~DeviceForward() = default;
  // As Transformer::forward: K/V of every token into the device's pages at the slots the batch's
  // block tables give, logits [batch.logit_rows.size(), vocab] to the host. `cache` is the host
  // cache whose shape and block ids the device's pages mirror.
  virtual void forward(const ForwardBatch& batch, const KvCache& cache, std::vector<float>& logits) = 0;
  // The device's memory now (cudaMemGetInfo): what is free and what it has in all.
  struct Memory {
    size_t free = 0, total = 0;
  };
  virtual Memory memory() const = 0;
  // Allocates now the working memory a step of up to `tokens` tokens at contexts up to `max_ctx`
  // needs (activations, attention's partial results, logits), so that a KV budget taken from
  // memory() afterwards leaves room for it.
  virtual void reserve(int tokens, int max_ctx) = 0;
  // Makes (or keeps) the device's pages for `cache`; fails naming what the device cannot store.
  virtual void bind(const KvCache& cache) = 0;
  // "cuda: NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB), weights 8.1 GiB (bf16)"
  virtual std::string describe() const = 0;
};

// The forward pass of `config`/`weights` on `device` (null for the CPU: Transformer's own). Loads
// the weights onto the device. Fails when the device is unavailable.
std::unique_ptr<DeviceForward> make_device_forward(ComputeDevice device, const ModelConfig& config,
                                                   const ModelWeights& weights,
                                                   const std::vector<float>& rope_inv_freq);

}  // namespace tq
