#include "model/transformer.h"

#include <algorithm>
#include <cstring>

#include "errors/error.h"
#include "kernels/norm.h"
#include "model/architecture.h"
#include "model/token_ids.h"

namespace tq {

void ForwardBuffers::reserve(const ModelConfig& c, int tokens) {
  if (tokens <= capacity) return;
  const size_t T = tokens;
  x.resize(T * c.hidden_size);
  h.resize(T * c.hidden_size);
  q.resize(T * c.num_heads * c.head_dim);
  k.resize(T * c.num_kv_heads * c.head_dim);
  v.resize(T * c.num_kv_heads * c.head_dim);
  attn.resize(T * c.num_heads * c.head_dim);
  q_store.resize(T * c.num_heads * c.head_dim);
  attn_store.resize(T * c.num_heads * c.head_dim);
  k_exact.resize(T * c.num_kv_heads * c.head_dim);
  v_exact.resize(T * c.num_kv_heads * c.head_dim);
  gate.resize(T * c.intermediate_size);
  up.resize(T * c.intermediate_size);
  out.resize(T * c.hidden_size);
  capacity = tokens;
}

Transformer::Transformer(const ModelConfig& config, const ModelWeights& weights)
    : config_(config), weights_(weights), rope_inv_freq_(config.rope_inv_freq(weights.rope_freq_factors)) {
  if (!config.architecture) fail("model config without an architecture (read it with config_from_hf / config_from_gguf)");
}

void Transformer::forward(const ForwardBatch& batch, KvCache& cache, std::vector<float>& logits) {
  const int T = batch.size();
  const int64_t hidden = config_.hidden_size, vocab = config_.vocab_size;
  if (T == 0) {
    logits.clear();
    return;
  }
  for (TokenId id : batch.tokens)
    if (!token_id_in_vocab(id, vocab)) fail("{}", token_id_outside_vocab("token id", id, vocab));
  if (device_forward_) {
    if (observer_ || layer_input_observer_) fail("observers of the forward pass run on the CPU only (--device cpu)");
    device_forward_->forward(batch, cache, logits);
    return;
  }
  buf_.reserve(config_, T);

  for (int t = 0; t < T; ++t)  // x = embedding[token]
    linear_row(weights_.token_embedding, batch.tokens[t], buf_.x.data() + t * hidden);
  run_layers(0, batch, cache, logits);
}

void Transformer::forward_from(int first_layer, const float* x, const ForwardBatch& batch, KvCache& cache,
                               std::vector<float>& logits) {
  const int T = batch.size();
  if (device_forward_) fail("forward_from runs on the CPU only (--device cpu)");
  if (first_layer < 0 || first_layer >= config_.num_layers)
    fail("forward_from: layer {} is not one of the model's {}", first_layer, config_.num_layers);
  if (T == 0) {
    logits.clear();
    return;
  }
  buf_.reserve(config_, T);
  std::copy_n(x, size_t(T) * config_.hidden_size, buf_.x.data());
  run_layers(first_layer, batch, cache, logits);
}

void Transformer::use_device(ComputeDevice device) {
  device_forward_.reset();  // the old device's weights go before the new one's come
  device_forward_ = make_device_forward(device, config_, weights_, rope_inv_freq_);
}

void Transformer::prepare_cache(const KvCache& cache) {
  if (device_forward_) device_forward_->bind(cache);
}

std::string Transformer::describe_device() const { return device_forward_ ? device_forward_->describe() : "cpu"; }

void Transformer::run_layers(int first_layer, const ForwardBatch& batch, KvCache& cache, std::vector<float>& logits) {
  const int T = batch.size();
  const int64_t hidden = config_.hidden_size, vocab = config_.vocab_size;
  for (int l = first_layer; l < config_.num_layers; ++l) {
    if (layer_input_observer_) layer_input_observer_(l, T, buf_.x.data());
    LayerContext ctx{config_, weights_.layers[l], l, batch, cache, buf_, rope_inv_freq_, observer_ ? &observer_ : nullptr};
    config_.architecture->layer(ctx);
  }

  // Final norm and LM head only for the rows whose logits are wanted.
  const int n_out = static_cast<int>(batch.logit_rows.size());
  for (int i = 0; i < n_out; ++i)
    rms_norm(buf_.x.data() + int64_t{batch.logit_rows[i]} * hidden, weights_.final_norm.data(), 1, hidden,
             config_.rms_norm_eps, buf_.h.data() + int64_t{i} * hidden);
  logits.resize(static_cast<size_t>(n_out) * vocab);
  const LinearWeights& head = weights_.lm_head.empty() ? weights_.token_embedding : weights_.lm_head;
  if (n_out > 0) apply_linear(head, buf_.h.data(), n_out, logits.data());
}

}  // namespace tq
