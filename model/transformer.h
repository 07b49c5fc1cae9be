// The forward pass of a decoder-only transformer over a batch of tokens from any number of
// sequences (prefill chunks and decode tokens alike). Each layer writes the step's K/V into
// the paged cache first and then lets every token attend over its sequence's cached rows, so
// a token's result does not depend on how the prompt was chunked or what else is in the batch
// (unless KvQuantOptions::exact_chunk_rows asks for a chunk's own rows unquantized).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "memory/huge_pages.h"
#include "model/config.h"
#include "model/device_forward.h"
#include "model/forward_batch.h"
#include "model/weights.h"

namespace tq {

// Activations of one step; grown on demand, reused across steps.
struct ForwardBuffers {
  int capacity = 0;
  LargeFloats x;       // [T, hidden] residual stream
  LargeFloats h;       // [T, hidden] normed input of a sub-block
  LargeFloats q;       // [T, n_heads * head_dim]
  LargeFloats k;       // [T, n_kv_heads * head_dim]
  LargeFloats v;       // [T, n_kv_heads * head_dim]
  LargeFloats attn;    // [T, n_heads * head_dim]
  LargeFloats q_store;     // [T, n_heads * head_dim] q in K's storage space (quantized KV)
  LargeFloats attn_store;  // [T, n_heads * head_dim] attention output in V's storage space
  LargeFloats k_exact;     // [T, n_kv_heads * head_dim] k in storage space, unquantized
  LargeFloats v_exact;     // [T, n_kv_heads * head_dim] (KvQuantOptions::exact_chunk_rows)
  std::vector<int> query_block_first;  // [blocks + 1] tokens attended together (layer_blocks.cpp)
  std::vector<int> first_part;    // [T + 1] attention parts of a quantized cache: token t's are
  LargeFloats part_out;    // [parts, n_heads * head_dim]   slots first_part[t] ..
  LargeFloats part_max;    // [parts, n_heads]              first_part[t + 1] - 1
  LargeFloats part_sum;    // [parts, n_heads]
  LargeFloats gate;    // [T, ffn]
  LargeFloats up;      // [T, ffn]
  LargeFloats out;     // [T, hidden] sub-block output before the residual add
  void reserve(const ModelConfig& c, int tokens);
};

// Sees each layer's attention inputs of a step, after RoPE and before they are cached
// (calibration of the quantized cache, engine/kv_calibration.h).
// q: [T, n_heads * head_dim], k: [T, n_kv_heads * head_dim].
using AttentionObserver = std::function<void(int layer, int n_tokens, const float* q, const float* k)>;

// Everything a layer function needs for one step.
struct LayerContext {
  const ModelConfig& config;
  const LayerWeights& w;
  int layer;
  const ForwardBatch& batch;
  KvCache& cache;
  ForwardBuffers& buf;
  const std::vector<float>& rope_inv_freq;  // [head_dim / 2]
  const AttentionObserver* observer = nullptr;
};

class Transformer {
 public:
  Transformer(const ModelConfig& config, const ModelWeights& weights);

  const ModelConfig& config() const { return config_; }

  // Runs the batch; K/V of every token are stored in `cache` at the slots its table gives.
  // logits: [batch.logit_rows.size(), vocab]. Throws tq::Error on an id outside the vocabulary.
  void forward(const ForwardBatch& batch, KvCache& cache, std::vector<float>& logits);
  // The same from layer `first_layer` on, with x [batch.size(), hidden] as the hidden states
  // entering it (what forward() had there): layers before it neither run nor touch the cache.
  // Results equal forward()'s bit for bit when x and the earlier layers' cache are what forward()
  // would have had (eval/kv_auto.h re-runs later layers only this way).
  void forward_from(int first_layer, const float* x, const ForwardBatch& batch, KvCache& cache,
                    std::vector<float>& logits);
  // Copies the hidden states entering every layer of every later forward() to `observer`
  // (layer, batch size, x [n_tokens, hidden]); empty: none.
  void set_layer_input_observer(std::function<void(int layer, int n_tokens, const float* x)> observer) {
    layer_input_observer_ = std::move(observer);
  }

  // Calls `observer` in every layer of every later forward() (empty: none).
  void set_attention_observer(AttentionObserver observer) { observer_ = std::move(observer); }

  // Runs every later forward() on `device` (model/device_forward.h) instead of the CPU: the
  // weights are loaded onto it now. Cpu: back to the CPU path. Observers and forward_from() are
  // CPU-only and fail while another device is set.
  void use_device(ComputeDevice device);
  // Makes the device's pages for `cache` now (a device forward otherwise does it at the first
  // forward() with it), failing for a cache the device cannot store; nothing on the CPU.
  void prepare_cache(const KvCache& cache);
  ComputeDevice device() const { return device_forward_ ? ComputeDevice::Cuda : ComputeDevice::Cpu; }
  // DeviceForward::reserve on the device; nothing on the CPU.
  void reserve_device_steps(int tokens, int max_ctx) {
    if (device_forward_) device_forward_->reserve(tokens, max_ctx);
  }
  // The device's free and total memory (zeros on the CPU).
  DeviceForward::Memory device_memory() const { return device_forward_ ? device_forward_->memory() : DeviceForward::Memory{}; }
  // "cpu" or the device's own description (DeviceForward::describe).
  std::string describe_device() const;

 private:
  const ModelConfig& config_;
  const ModelWeights& weights_;
  std::vector<float> rope_inv_freq_;
  ForwardBuffers buf_;
  AttentionObserver observer_;
  std::function<void(int layer, int n_tokens, const float* x)> layer_input_observer_;
  std::unique_ptr<DeviceForward> device_forward_;

  void run_layers(int first_layer, const ForwardBatch& batch, KvCache& cache, std::vector<float>& logits);
};

}  // namespace tq
