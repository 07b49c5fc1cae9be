#include "kv/kv_row_codec.h"

#include <cstring>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "errors/error.h"
#include "quant/baseline_quant.h"

namespace tq {

namespace {
constexpr int kMaxDim = 512;

RowCodec fp_codec(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::F32: return RowCodec::F32;
    case KvDtype::BF16: return RowCodec::BF16;
    default: return RowCodec::F16;
  }
}
}  // namespace

KvRowCodec::KvRowCodec(KvDtype dtype, int head_dim, int layer, const KvQuantOptions& o,
                       std::vector<std::vector<int>> order, std::vector<std::vector<float>> center,
                       std::vector<std::vector<float>> scale, ChannelCoding channels)
    : dtype_(dtype),
      d_(head_dim),
      scale_mode_(o.scale_mode),
      order_(std::move(order)),
      center_(std::move(center)),
      scale_(std::move(scale)),
      channels_(std::move(channels)) {
  if ((!center_.empty() || !scale_.empty()) && kv_dtype_is_fp(dtype))
    fail("full-precision KV rows ({}) are stored as they are, without center or scale", kv_dtype_name(dtype));
  for (const auto* per_head : {&center_, &scale_})
    for (const auto& c : *per_head)
      if (static_cast<int>(c.size()) != d_) fail("KV center/scale of layer {} has {} values, head_dim is {}", layer, c.size(), d_);
  for (const auto& sc : scale_)
    for (float v : sc)
      if (!(v > 0.0f) || !std::isfinite(v)) fail("KV key scale of layer {} has a non-positive or non-finite entry {}", layer, v);
  check_kv_dtype(dtype, head_dim, o.rotation == RotationKind::hadamard);
  if (dtype == KvDtype::Q4_0H) {
    rot_ = Rotation::make(RotationKind::hadamard, d_, o.seed, layer);
  } else if (kv_dtype_is_tq(dtype) && !kv_dtype_is_channel_bits(dtype)) {
    const auto [hi, lo] = kv_dtype_tq_bits(dtype);
    const int rd = kv_dtype_is_split(dtype) ? d_ / 2 : d_;
    rot_ = Rotation::make(o.rotation, rd, o.seed, layer);
    const bool own_codebook = kv_dtype_is_pairs(dtype) || kv_dtype_is_orthant(dtype);
    if (!own_codebook) cb_hi_ = make_codebook(o.codebook, rd, hi);
    if (kv_dtype_is_split(dtype)) cb_lo_ = make_codebook(o.codebook, rd, lo);
    // Rows the integer attention arithmetic may read (keys and values at 2 to 4 bits): coded with
    // the levels it holds. Orthant rows have no integer path yet: their patterns stay as generated.
    if (!kv_dtype_is_split(dtype) && !own_codebook && hi >= 2 && (o.int8_key_scores || o.int8_value_sums))
      cb_hi_ = snapped_to_int8_grid(std::move(cb_hi_));
    if (kv_dtype_is_pairs(dtype)) pairs_ = &tq::pair_codebook(d_, o.int8_key_scores || o.int8_value_sums);
    if (kv_dtype_is_orthant(dtype)) orthant_ = &tq::orthant_codebook(d_, hi);
  }
  if (kv_dtype_is_channel_bits(dtype)) {
    const int bits = kv_dtype_tq_bits(dtype).first;
    if (channels_.basis.empty())
      fail("--kv-cache-dtype {} needs the calibrated channel axes of layer {} (computed by the calibration pass)",
           kv_dtype_name(dtype), layer);
    if (channels_.layout.dim() != d_ || channels_.layout.total_bits() != bits * d_ ||
        static_cast<int>(channels_.layout.part_dims.size()) > kMaxChannelParts)
      fail("channel-bit layout of layer {} covers {} coordinates with {} bits, need {} with {}", layer,
           channels_.layout.dim(), channels_.layout.total_bits(), d_, bits * d_);
    if (channels_.sigma.size() != channels_.basis.size()) fail("channel axes of layer {}: {} bases but {} sigma sets", layer, channels_.basis.size(), channels_.sigma.size());
    for (size_t h = 0; h < channels_.basis.size(); ++h) {
      if (channels_.basis[h].size() != size_t(d_) * d_ || channels_.sigma[h].size() != size_t(d_))
        fail("channel axes of layer {} head {} do not match head_dim {}", layer, h, d_);
      for (float v : channels_.sigma[h])
        if (!(v > 0.0f) || !std::isfinite(v)) fail("channel axes of layer {} head {}: non-positive sigma {}", layer, h, v);
    }
    channel_codebooks_.resize(kMaxChannelBits + 1);
    for (int b : channels_.layout.part_bits)
      if (b > 0 && channel_codebooks_[b].bits == 0) channel_codebooks_[b] = make_standard_gaussian_codebook(b);
  } else if (!channels_.basis.empty()) {
    fail("channel axes were given for {}, which is not a channel-bit dtype", kv_dtype_name(dtype));
  }
  if (kv_dtype_is_split(dtype)) {
    for (const std::vector<int>& p : order_) {
      std::vector<int> sorted = p;
      std::sort(sorted.begin(), sorted.end());
      bool ok = static_cast<int>(p.size()) == d_;
      for (int j = 0; ok && j < d_; ++j) ok = sorted[j] == j;
      if (!ok) fail("outlier channel order of layer {} is not a permutation of 0..{}", layer, d_ - 1);
    }
  } else if (!order_.empty()) {
    fail("an outlier channel order was given for {}, which does not split rows", kv_dtype_name(dtype));
  }
}

const std::vector<int>& KvRowCodec::order(int head) const {
  static const std::vector<int> none;
  return head < static_cast<int>(order_.size()) ? order_[head] : none;
}

const Codebook& KvRowCodec::codebook() const {
  if (pairs_) fail("--kv-cache-dtype tq4p rows are coded with a pair codebook (pair_codebook()), not a scalar one");
  if (orthant_) fail("--kv-cache-dtype {} rows are coded with an orthant codebook (orthant_codebook()), not a scalar one", kv_dtype_name(dtype_));
  return cb_hi_;
}

const float* KvRowCodec::center(int head) const {
  return head < static_cast<int>(center_.size()) ? center_[head].data() : nullptr;
}

const float* KvRowCodec::scale(int head) const {
  return head < static_cast<int>(scale_.size()) ? scale_[head].data() : nullptr;
}

const float* KvRowCodec::channel_basis(int head) const {
  if (head < 0 || head >= static_cast<int>(channels_.basis.size()))
    fail("channel axes: KV head {} of {} calibrated", head, channels_.basis.size());
  return channels_.basis[head].data();
}

const float* KvRowCodec::channel_sigma(int head) const {
  channel_basis(head);
  return channels_.sigma[head].data();
}

void KvRowCodec::query_to_storage(const float* q, int head, float* y) const {
  if (kv_dtype_is_channel_bits(dtype_)) {  // diag(sigma) U (q * scale): the inverse transpose of to_storage
    const float* s = scale(head);
    const float* u = channel_basis(head);
    const float* sigma = channel_sigma(head);
    for (int i = 0; i < d_; ++i) {
      float acc = 0.0f;
      for (int j = 0; j < d_; ++j) acc += u[size_t(i) * d_ + j] * (s ? q[j] * s[j] : q[j]);
      y[i] = acc * sigma[i];
    }
    return;
  }
  if (const float* s = scale(head)) {
    float scaled[kMaxDim];
    for (int j = 0; j < d_; ++j) scaled[j] = q[j] * s[j];
    to_storage(scaled, head, y);
  } else {
    to_storage(q, head, y);
  }
}

void KvRowCodec::output_from_storage(const float* y, int head, float* x) const {
  from_storage(y, head, x);
  const float* mu = center(head);
  const float* s = scale(head);
  for (int j = 0; j < d_; ++j) x[j] = x[j] * (s ? s[j] : 1.0f) + (mu ? mu[j] : 0.0f);
}

CodedRowFormat KvRowCodec::row_format() const {
  CodedRowFormat f;
  f.dim = d_;
  if (kv_dtype_is_fp(dtype_)) {
    f.codec = fp_codec(dtype_);
  } else if (dtype_ == KvDtype::Q8_0) {
    f.codec = RowCodec::Q8_0;
  } else if (dtype_ == KvDtype::Q4_0 || dtype_ == KvDtype::Q4_0H) {
    f.codec = RowCodec::Q4_0;
  } else {
    if (kv_dtype_is_channel_bits(dtype_)) {
      f.codec = RowCodec::TQ_CHANNELS;
      f.f16_scale = true;
      f.parts = static_cast<int>(channels_.layout.part_dims.size());
      for (int p = 0; p < f.parts; ++p) {
        f.part_dims[p] = channels_.layout.part_dims[p];
        f.part_bits[p] = channels_.layout.part_bits[p];
        f.part_levels[p] = f.part_bits[p] > 0 ? channel_codebooks_[f.part_bits[p]].centroids.data() : nullptr;
      }
      return f;
    }
    if (pairs_) {
      f.codec = RowCodec::TQ_PAIRS;
      f.bits = 4;
      f.f16_scale = true;
      f.levels = pairs_->points.data();
      return f;
    }
    if (orthant_) {
      f.codec = RowCodec::TQ_ORTHANT;
      f.bits = orthant_->bits;
      f.f16_scale = true;
      f.levels = orthant_->patterns.data();
      return f;
    }
    f.codec = kv_dtype_is_split(dtype_) ? RowCodec::TQ_SPLIT : RowCodec::TQ;
    f.f16_scale = kv_dtype_has_f16_norm(dtype_);
    f.bits = cb_hi_.bits;
    f.levels = cb_hi_.centroids.data();
    if (kv_dtype_is_split(dtype_)) {
      f.bits_lo = cb_lo_.bits;
      f.levels_lo = cb_lo_.centroids.data();
    }
  }
  return f;
}

void KvRowCodec::to_storage(const float* x, int head, float* y) const {
  if (kv_dtype_is_channel_bits(dtype_)) {
    const float* u = channel_basis(head);
    const float* sigma = channel_sigma(head);
    for (int i = 0; i < d_; ++i) {
      float acc = 0.0f;
      for (int j = 0; j < d_; ++j) acc += u[size_t(i) * d_ + j] * x[j];
      y[i] = acc / sigma[i];
    }
    return;
  }
  if (!kv_dtype_is_split(dtype_)) {
    if (transforms()) {
      rot_.apply(x, y);
    } else {
      std::copy(x, x + d_, y);
    }
    return;
  }
  const std::vector<int>& p = order(head);
  float permuted[kMaxDim];
  for (int j = 0; j < d_; ++j) permuted[j] = x[p.empty() ? j : p[j]];
  rot_.apply(permuted, y);
  rot_.apply(permuted + d_ / 2, y + d_ / 2);
}

void KvRowCodec::from_storage(const float* y, int head, float* x) const {
  if (kv_dtype_is_channel_bits(dtype_)) {
    const float* u = channel_basis(head);
    const float* sigma = channel_sigma(head);
    std::fill(x, x + d_, 0.0f);
    for (int i = 0; i < d_; ++i) {
      const float yi = y[i] * sigma[i];
      for (int j = 0; j < d_; ++j) x[j] += u[size_t(i) * d_ + j] * yi;
    }
    return;
  }
  if (!kv_dtype_is_split(dtype_)) {
    if (transforms()) {
      rot_.apply_transpose(y, x);
    } else {
      std::copy(y, y + d_, x);
    }
    return;
  }
  const std::vector<int>& p = order(head);
  float permuted[kMaxDim];
  rot_.apply_transpose(y, permuted);
  rot_.apply_transpose(y + d_ / 2, permuted + d_ / 2);
  for (int j = 0; j < d_; ++j) x[p.empty() ? j : p[j]] = permuted[j];
}

void KvRowCodec::exact_storage_row(const float* x, int head, float* y) const {
  const float* mu = center(head);
  const float* s = scale(head);
  if (!mu && !s) {
    to_storage(x, head, y);
    return;
  }
  float adjusted[kMaxDim];
  for (int j = 0; j < d_; ++j) adjusted[j] = (x[j] - (mu ? mu[j] : 0.0f)) / (s ? s[j] : 1.0f);
  to_storage(adjusted, head, y);
}

void KvRowCodec::encode(const float* x_in, int head, uint8_t* row) const {
  if (kv_dtype_is_fp(dtype_)) {
    kv_encode_row(dtype_, x_in, d_, row);
    return;
  }
  float adjusted[kMaxDim];
  const float* x = x_in;
  const float* mu = center(head);
  const float* s = scale(head);
  if (mu || s) {
    for (int j = 0; j < d_; ++j) adjusted[j] = (x_in[j] - (mu ? mu[j] : 0.0f)) / (s ? s[j] : 1.0f);
    x = adjusted;
  }
  switch (dtype_) {
    case KvDtype::Q8_0: quantize_row_q8_0(x, d_, row); return;
    case KvDtype::Q4_0: quantize_row_q4_0(x, d_, row); return;
    case KvDtype::Q4_0H: {
      float y[kMaxDim];
      rot_.apply(x, y);
      quantize_row_q4_0(y, d_, row);
      return;
    }
    default: break;
  }
  if (kv_dtype_is_channel_bits(dtype_)) {
    float y[kMaxDim];
    to_storage(x, head, y);
    encode_channel_row(y, channels_.layout, channel_codebooks_, channel_sigma(head), row);
    return;
  }
  if (pairs_) {
    tq_encode_pair_row(x, *pairs_, rot_, row, scale_mode_);
    return;
  }
  if (orthant_) {
    tq_encode_orthant_row(x, *orthant_, rot_, row, scale_mode_);
    return;
  }
  if (kv_dtype_has_f16_norm(dtype_)) {  // the fp32 row, its scale then rounded to fp16
    uint8_t full[kMaxDim / 2 + 4];
    tq_encode_row(x, cb_hi_, rot_, full, scale_mode_);
    const size_t codes = tq_codes_bytes(d_, cb_hi_.bits);
    std::memcpy(row, full, codes);
    const uint16_t scale = tq_scale_to_fp16(tq_row_scale(full, d_, cb_hi_.bits));
    std::memcpy(row + codes, &scale, sizeof scale);
    return;
  }
  if (!kv_dtype_is_split(dtype_)) {
    tq_encode_row(x, cb_hi_, rot_, row, scale_mode_);
    return;
  }
  const std::vector<int>& p = order(head);
  float permuted[kMaxDim];
  for (int j = 0; j < d_; ++j) permuted[j] = x[p.empty() ? j : p[j]];
  tq_encode_split_row(permuted, cb_hi_, rot_, cb_lo_, rot_, row, scale_mode_);
}

void KvRowCodec::decode(const uint8_t* row, int head, float* x) const {
  float y[kMaxDim];
  decode_coded_row_scalar(row_format(), row, y);
  from_storage(y, head, x);
  const float* mu = center(head);
  const float* s = scale(head);
  for (int j = 0; j < d_; ++j) x[j] = x[j] * (s ? s[j] : 1.0f) + (mu ? mu[j] : 0.0f);
}

}  // namespace tq
