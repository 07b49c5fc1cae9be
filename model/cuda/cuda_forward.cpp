#include "model/cuda/cuda_forward.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "errors/error.h"
#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_array.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/transformer_ops.h"
#include "model/architecture.h"

namespace tq {
namespace {

using cuda::DeviceArray;
using cuda::DeviceMatrix;
using cuda::Element;

Element device_element(DType stored) {
  if (stored == DType::F32) return Element::F32;
  if (stored == DType::F16) return Element::F16;
  return Element::BF16;
}

// At most this many fp32 values pass through the staging buffer at a time while loading.
constexpr int64_t kStagingFloats = int64_t{1} << 24;

DeviceMatrix upload_matrix(const LinearWeights& lw, DeviceArray<float>& staging, cudaStream_t stream) {
  DeviceMatrix m;
  m.element = device_element(lw.dtype);
  m.rows = lw.out;
  m.cols = lw.in;
  m.data.resize(static_cast<size_t>(lw.out * lw.in) * cuda::element_bytes(m.element));
  const int64_t chunk = std::max<int64_t>(1, kStagingFloats / std::max<int64_t>(1, lw.in));
  std::vector<float> rows;  // [chunk, in]
  for (int64_t first = 0; first < lw.out; first += chunk) {
    const int64_t count = std::min(chunk, lw.out - first);
    rows.resize(static_cast<size_t>(count * lw.in));
    for (int64_t r = 0; r < count; ++r) linear_row(lw, first + r, rows.data() + r * lw.in);
    cuda::upload_rows(m, first, count, rows.data(), staging, stream);
  }
  if (!lw.bias.empty()) m.bias.upload(lw.bias, stream);
  return m;
}

DeviceArray<float> upload_floats(const std::vector<float>& v, cudaStream_t stream) {
  DeviceArray<float> d;
  d.upload(v, stream);
  return d;
}

struct DeviceLayer {
  DeviceArray<float> attn_norm, ffn_norm, q_norm, k_norm;
  DeviceMatrix wq, wk, wv, wo, gate, up, down;
};

class CudaForward final : public DeviceForward {
 public:
  CudaForward(const ModelConfig& config, const ModelWeights& weights, const std::vector<float>& rope_inv_freq)
      : config_(config) {
    if (config.head_dim > cuda::kMaxHeadDim || config.head_dim % 2 != 0)
      fail("--device cuda: head_dim {} (even, at most {})", config.head_dim, cuda::kMaxHeadDim);
    if (config.num_heads / config.num_kv_heads > cuda::kMaxQueriesPerKvHead)
      fail("--device cuda: {} query heads per KV head (at most {})", config.num_heads / config.num_kv_heads,
           cuda::kMaxQueriesPerKvHead);
    cuda::check(cudaSetDevice(0), "cudaSetDevice");
    cuda::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    blas_ = std::make_unique<cuda::Blas>(stream_);
    DeviceArray<float> staging;
    embedding_ = upload_matrix(weights.token_embedding, staging, stream_);
    if (!weights.lm_head.empty()) lm_head_ = upload_matrix(weights.lm_head, staging, stream_);
    final_norm_ = upload_floats(weights.final_norm, stream_);
    inv_freq_ = upload_floats(rope_inv_freq, stream_);
    for (const LayerWeights& w : weights.layers) {
      DeviceLayer l;
      l.attn_norm = upload_floats(w.attn_norm, stream_);
      l.ffn_norm = upload_floats(w.ffn_norm, stream_);
      if (config.architecture->qk_norm) {
        l.q_norm = upload_floats(w.q_norm, stream_);
        l.k_norm = upload_floats(w.k_norm, stream_);
      }
      l.wq = upload_matrix(w.wq, staging, stream_);
      l.wk = upload_matrix(w.wk, staging, stream_);
      l.wv = upload_matrix(w.wv, staging, stream_);
      l.wo = upload_matrix(w.wo, staging, stream_);
      l.gate = upload_matrix(w.w_gate, staging, stream_);
      l.up = upload_matrix(w.w_up, staging, stream_);
      l.down = upload_matrix(w.w_down, staging, stream_);
      layers_.push_back(std::move(l));
    }
    cuda::check(cudaStreamSynchronize(stream_), "loading the weights");
  }

  ~CudaForward() override {
    layers_.clear();
    blas_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string describe() const override {
    size_t bytes = embedding_.bytes() + lm_head_.bytes();
    for (const DeviceLayer& l : layers_)
      for (const DeviceMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) bytes += m->bytes();
    return fmt::format("cuda: {}, weights {:.2f} GiB on the device ({})", cuda::describe_device(0),
                       double(bytes) / double(1ull << 30), cuda::element_name(layers_.empty() ? embedding_.element : layers_[0].wq.element));
  }

  void reserve(int tokens, int max_ctx) override {
    const ModelConfig& m = config_;
    reserve_buffers(tokens);
    logits_.reserve(size_t(tokens) * m.vocab_size);
    const int widest = std::max({m.hidden_size, m.intermediate_size, m.num_heads * m.head_dim});
    scratch_.reserve(size_t(tokens) * widest * sizeof(uint16_t));  // activations as bf16/f16 for cuBLAS
    const size_t parts = (size_t(max_ctx) + cuda::kAttentionPartRows - 1) / cuda::kAttentionPartRows;
    const size_t part_slots = size_t(tokens) * parts * m.num_heads;
    attention_scratch_.acc.reserve(part_slots * m.head_dim);
    attention_scratch_.max.reserve(part_slots);
    attention_scratch_.sum.reserve(part_slots);
  }

  Memory memory() const override {
    Memory m;
    cuda::check(cudaMemGetInfo(&m.free, &m.total), "cudaMemGetInfo");
    return m;
  }

  void forward(const ForwardBatch& batch, const KvCache& cache, std::vector<float>& logits) override {
    const ModelConfig& m = config_;
    const int T = batch.size();
    if (T == 0) {
      logits.clear();
      return;
    }
    bind(cache);
    upload_batch(batch);
    reserve_buffers(T);
    const int64_t hidden = m.hidden_size, ffn = m.intermediate_size;
    const cuda::TokenSlots slots{T, positions_.data(), table_begin_.data(), tables_.data()};
    const float scale = 1.0f / std::sqrt(static_cast<float>(m.head_dim));
    const int max_ctx = *std::max_element(batch.positions.begin(), batch.positions.end()) + 1;
    cuda::embed_rows(embedding_.data.data(), embedding_.element, hidden, ids_.data(), T, x_.data(), stream_);
    for (int l = 0; l < m.num_layers; ++l) {
      DeviceLayer& w = layers_[l];
      cuda::rms_norm(x_.data(), w.attn_norm.data(), T, m.hidden_size, m.rms_norm_eps, h_.data(), stream_);
      linear(w.wq, h_.data(), T, q_.data());
      linear(w.wk, h_.data(), T, k_.data());
      linear(w.wv, h_.data(), T, v_.data());
      if (m.architecture->qk_norm) {
        cuda::rms_norm(q_.data(), w.q_norm.data(), int64_t{T} * m.num_heads, m.head_dim, m.rms_norm_eps, q_.data(), stream_);
        cuda::rms_norm(k_.data(), w.k_norm.data(), int64_t{T} * m.num_kv_heads, m.head_dim, m.rms_norm_eps, k_.data(), stream_);
      }
      cuda::rope(q_.data(), T, m.num_heads, m.head_dim, positions_.data(), inv_freq_.data(), m.rope_pairing, stream_);
      cuda::rope(k_.data(), T, m.num_kv_heads, m.head_dim, positions_.data(), inv_freq_.data(), m.rope_pairing, stream_);
      cuda::store_kv_rows(page_shapes_[l], slots, k_.data(), v_.data(), k_pages_[l].data(), v_pages_[l].data(), stream_);
      cuda::paged_attention(page_shapes_[l], slots, m.num_heads, max_ctx, q_.data(), k_pages_[l].data(),
                            v_pages_[l].data(), scale, attn_.data(), attention_scratch_, stream_);
      linear(w.wo, attn_.data(), T, out_.data());
      cuda::add_in_place(x_.data(), out_.data(), T * hidden, stream_);
      cuda::rms_norm(x_.data(), w.ffn_norm.data(), T, m.hidden_size, m.rms_norm_eps, h_.data(), stream_);
      linear(w.gate, h_.data(), T, gate_.data());
      linear(w.up, h_.data(), T, up_.data());
      cuda::silu_mul(gate_.data(), up_.data(), T * ffn, gate_.data(), stream_);
      linear(w.down, gate_.data(), T, out_.data());
      cuda::add_in_place(x_.data(), out_.data(), T * hidden, stream_);
    }
    // Final norm and LM head for the rows whose logits are wanted.
    const int n_out = static_cast<int>(batch.logit_rows.size());
    logits.resize(static_cast<size_t>(n_out) * m.vocab_size);
    if (n_out == 0) return;
    cuda::embed_rows(x_.data(), Element::F32, hidden, logit_rows_.data(), n_out, h_.data(), stream_);
    cuda::rms_norm(h_.data(), final_norm_.data(), n_out, m.hidden_size, m.rms_norm_eps, h_.data(), stream_);
    const DeviceMatrix& head = lm_head_.rows > 0 ? lm_head_ : embedding_;
    logits_.reserve(logits.size());
    linear(head, h_.data(), n_out, logits_.data());
    logits_.download(logits.data(), logits.size(), stream_);
  }

 private:
  const ModelConfig& config_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::Blas> blas_;
  DeviceMatrix embedding_, lm_head_;
  DeviceArray<float> final_norm_, inv_freq_;
  std::vector<DeviceLayer> layers_;
  // The KV pages of the cache they were made for: [layer] each [blocks, n_kv, block_size, head_dim].
  const KvCache* bound_cache_ = nullptr;
  std::string bound_signature_;  // the bound cache's mode, block size and blocks
  std::vector<cuda::KvPageShape> page_shapes_;  // [layer]
  std::vector<DeviceArray<uint8_t>> k_pages_, v_pages_;
  // One step's activations and indices.
  int capacity_ = 0;
  DeviceArray<float> x_, h_, q_, k_, v_, attn_, out_, gate_, up_, logits_;
  DeviceArray<int32_t> ids_, positions_, table_begin_, tables_, logit_rows_;
  DeviceArray<uint8_t> scratch_;
  cuda::AttentionScratch attention_scratch_;

  void linear(const DeviceMatrix& w, const float* x, int n, float* y) { cuda::linear(*blas_, w, x, n, y, scratch_); }

  // The device pages mirror `cache`: same layers, blocks and block ids, each layer in its own
  // element type. A new cache (eval runs one per mode) gets new pages; what they held does not
  // matter, as a row is written before it is read.
  void bind(const KvCache& cache) override {
    const KvCacheShape& s = cache.shape();
    const std::string signature = fmt::format("{} {} {}", s.describe(), s.block_size, cache.num_blocks());
    if (bound_cache_ == &cache && bound_signature_ == signature) return;
    if (const std::string why = device_cache_unsupported(ComputeDevice::Cuda, s); !why.empty())
      fail("--device cuda: {}", why);
    std::vector<cuda::KvPageShape> shapes;
    for (int l = 0; l < config_.num_layers; ++l)
      shapes.push_back({config_.num_kv_heads, config_.head_dim, s.block_size,
                        s.k_dtype_of(l) == KvDtype::F32 ? Element::F32 : Element::F16});
    bound_cache_ = nullptr;
    k_pages_.clear();
    v_pages_.clear();
    for (const cuda::KvPageShape& shape : shapes) {
      const size_t side_bytes = size_t(cache.num_blocks()) * shape.block_size * shape.n_kv_heads * shape.head_dim *
                                cuda::element_bytes(shape.element);
      k_pages_.emplace_back(side_bytes);
      v_pages_.emplace_back(side_bytes);
    }
    page_shapes_ = std::move(shapes);
    bound_cache_ = &cache;
    bound_signature_ = signature;
  }

  void upload_batch(const ForwardBatch& batch) {
    const int T = batch.size();
    // Tokens of one sequence share one copy of its block table.
    std::vector<int32_t> begin(T), tables;
    std::unordered_map<const BlockTable*, int32_t> seen;
    for (int t = 0; t < T; ++t) {
      const BlockTable* table = batch.tables[t];
      const auto [it, fresh] = seen.try_emplace(table, static_cast<int32_t>(tables.size()));
      if (fresh) tables.insert(tables.end(), table->blocks.begin(), table->blocks.end());
      begin[t] = it->second;
      const int block_size = bound_cache_->shape().block_size;
      if (batch.positions[t] < 0 || batch.positions[t] / block_size >= static_cast<int>(table->blocks.size()))
        fail("--device cuda: token {} at position {} is outside its block table ({} blocks)", t, batch.positions[t],
             table->blocks.size());
    }
    for (int32_t b : tables)
      if (b < 0 || b >= bound_cache_->num_blocks()) fail("--device cuda: block id {} outside the cache", b);
    ids_.upload(batch.tokens.data(), T, stream_);
    positions_.upload(batch.positions.data(), T, stream_);
    table_begin_.upload(begin, stream_);
    tables_.upload(tables, stream_);
    logit_rows_.upload(batch.logit_rows, stream_);
    // The host vectors above die with this call: the copies must be done first.
    cuda::check(cudaStreamSynchronize(stream_), "uploading the batch");
  }

  void reserve_buffers(int T) {
    if (T <= capacity_) return;
    const ModelConfig& m = config_;
    const size_t t = T;
    x_.resize(t * m.hidden_size);
    h_.resize(t * m.hidden_size);
    out_.resize(t * m.hidden_size);
    q_.resize(t * m.num_heads * m.head_dim);
    attn_.resize(t * m.num_heads * m.head_dim);
    k_.resize(t * m.num_kv_heads * m.head_dim);
    v_.resize(t * m.num_kv_heads * m.head_dim);
    gate_.resize(t * m.intermediate_size);
    up_.resize(t * m.intermediate_size);
    capacity_ = T;
  }
};

}  // namespace

std::string cuda_unavailable() {
  std::string why;
  if (cuda::device_count(&why) == 0) return "no CUDA device: " + why;
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "cannot read the CUDA device's properties";
  // The kernels are built for sm_90a alone (CMakeLists.txt): another generation has no code to run.
  if (p.major != 9)
    return fmt::format("{} is sm_{}{}; this build's kernels are for Hopper (sm_90a) only", p.name, p.major, p.minor);
  return {};
}

std::unique_ptr<DeviceForward> make_cuda_forward(const ModelConfig& config, const ModelWeights& weights,
                                                 const std::vector<float>& rope_inv_freq) {
  return std::make_unique<CudaForward>(config, weights, rope_inv_freq);
}

}  // namespace tq
