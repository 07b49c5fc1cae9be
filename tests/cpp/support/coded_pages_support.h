// Shared by the coded-attention tests: row formats by spec, encoders through the library,
// one layer's scrambled K/V pages with their scalar-decoded rows, and comparison helpers.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/paged_attention.h"
#include "kernels/coded_row.h"
#include "kernels/dequantize.h"
#include "kernels/tq_packing.h"
#include "quant/baseline_quant.h"
#include "quant/codebook.h"
#include "quant/rotation.h"
#include "quant/tq_row.h"

namespace tq::coded_test {

// What one side stores: a codec and, for TurboQuant, its bit widths.
struct Spec {
  RowCodec codec = RowCodec::F32;
  int bits = 0, bits_lo = 0;
};

inline std::string spec_name(const Spec& s) {
  switch (s.codec) {
    case RowCodec::F32: return "f32";
    case RowCodec::BF16: return "bf16";
    case RowCodec::F16: return "f16";
    case RowCodec::Q8_0: return "q8_0";
    case RowCodec::Q4_0: return "q4_0";
    case RowCodec::TQ: return "tq" + std::to_string(s.bits);
    case RowCodec::TQ_SPLIT: return "tq" + std::to_string(s.bits) + std::to_string(s.bits_lo);
  }
  return "?";
}

inline const Spec kF32{RowCodec::F32}, kBF16{RowCodec::BF16}, kF16{RowCodec::F16}, kQ8{RowCodec::Q8_0},
    kQ4{RowCodec::Q4_0}, kTq1{RowCodec::TQ, 1}, kTq2{RowCodec::TQ, 2}, kTq3{RowCodec::TQ, 3},
    kTq4{RowCodec::TQ, 4}, kSplit43{RowCodec::TQ_SPLIT, 4, 3}, kSplit32{RowCodec::TQ_SPLIT, 3, 2};
inline const std::vector<Spec> kAllSpecs = {kF32, kBF16, kF16, kQ8, kQ4, kTq1, kTq2, kTq3, kTq4, kSplit43, kSplit32};

// Whether head_dim d can be stored as s (mirrors the format's documented requirements).
inline bool spec_fits(const Spec& s, int d) {
  const auto tq_fits = [](int dim, int bits) { return dim % (bits == 4 ? 2 : bits == 2 ? 4 : 8) == 0; };
  switch (s.codec) {
    case RowCodec::Q8_0:
    case RowCodec::Q4_0: return d % 32 == 0;
    case RowCodec::TQ: return tq_fits(d, s.bits);
    case RowCodec::TQ_SPLIT: return d % 2 == 0 && tq_fits(d / 2, s.bits) && tq_fits(d / 2, s.bits_lo);
    default: return true;
  }
}

inline const Codebook& codebook_for(int d, int bits) {
  static std::map<std::pair<int, int>, Codebook> cache;
  auto it = cache.find({d, bits});
  if (it == cache.end()) it = cache.emplace(std::make_pair(d, bits), make_codebook(CodebookKind::beta, d, bits)).first;
  return it->second;
}

// Dense for any size, Hadamard for powers of two (both kinds get used). `layer` varies the seed.
inline const Rotation& rotation_for(int d, int layer) {
  static std::map<std::pair<int, int>, Rotation> cache;
  auto it = cache.find({d, layer});
  if (it == cache.end()) {
    const bool pow2 = (d & (d - 1)) == 0;
    const RotationKind kind = pow2 && layer % 2 == 0 ? RotationKind::hadamard : RotationKind::dense;
    it = cache.emplace(std::make_pair(d, layer), Rotation::make(kind, d, 42, layer)).first;
  }
  return it->second;
}

inline CodedRowFormat format_for(const Spec& s, int d) {
  CodedRowFormat f;
  f.codec = s.codec;
  f.dim = d;
  if (s.codec == RowCodec::TQ) {
    f.bits = s.bits;
    f.levels = codebook_for(d, s.bits).centroids.data();
  } else if (s.codec == RowCodec::TQ_SPLIT) {
    f.bits = s.bits;
    f.bits_lo = s.bits_lo;
    f.levels = codebook_for(d / 2, s.bits).centroids.data();
    f.levels_lo = codebook_for(d / 2, s.bits_lo).centroids.data();
  }
  return f;
}

// Stores x (d floats) as s into `row` with the library's encoders.
inline void encode_row(const Spec& s, int d, const float* x, uint8_t* row) {
  switch (s.codec) {
    case RowCodec::F32: std::memcpy(row, x, sizeof(float) * d); return;
    case RowCodec::BF16:
      for (int j = 0; j < d; ++j) {
        const uint16_t h = fp32_to_bf16(x[j]);
        std::memcpy(row + 2 * j, &h, 2);
      }
      return;
    case RowCodec::F16:
      for (int j = 0; j < d; ++j) {
        const uint16_t h = fp32_to_fp16(x[j]);
        std::memcpy(row + 2 * j, &h, 2);
      }
      return;
    case RowCodec::Q8_0: quantize_row_q8_0(x, d, row); return;
    case RowCodec::Q4_0: quantize_row_q4_0(x, d, row); return;
    case RowCodec::TQ: tq_encode_row(x, codebook_for(d, s.bits), rotation_for(d, 0), row); return;
    case RowCodec::TQ_SPLIT:  // the halves get different rotations: the format allows it
      tq_encode_split_row(x, codebook_for(d / 2, s.bits), rotation_for(d / 2, 2), codebook_for(d / 2, s.bits_lo),
                          rotation_for(d / 2, 3), row);
      return;
  }
}

// n TurboQuant rows (format f: tq, f.bits bits, fp16 or fp32 scale) of random codes and a random
// positive scale, `stride` bytes apart; the bytes between rows hold `fill`.
inline std::vector<uint8_t> random_tq_rows(const CodedRowFormat& f, int n, size_t stride, std::mt19937& rng,
                                           uint8_t fill = 0x5A) {
  std::vector<uint8_t> bytes(n * stride, fill);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.2f, 3.0f);
  const int codes = f.dim * f.bits / 8;
  for (int i = 0; i < n; ++i) {
    uint8_t* row = bytes.data() + i * stride;
    for (int c = 0; c < codes; ++c) row[c] = static_cast<uint8_t>(byte(rng));
    const float s = scale(rng);
    if (f.f16_scale) {
      const uint16_t h = fp32_to_fp16(s);
      std::memcpy(row + codes, &h, 2);
    } else {
      std::memcpy(row + codes, &s, 4);
    }
  }
  return bytes;
}

inline std::vector<float> random_vec(size_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (float& e : v) e = normal(rng);
  return v;
}

// One layer's K/V pages for one sequence, plus the scalar-decoded rows.
struct Pages {
  int d = 0, n_kv = 0, n_ctx = 0, block_size = 0;
  std::vector<uint8_t> k_pages, v_pages;
  std::vector<int32_t> block_table;
  PagedRows k, v;
  std::vector<float> k_dec, v_dec;  // [n_ctx, n_kv, d]
};

// K pages are laid out [block][kv head][offset] with padded rows, V pages [block][offset][kv head]
// (so all three strides are exercised). Blocks are handed out in a scrambled order; unused bytes
// hold a fill pattern so that reading a wrong row shows.
inline Pages build_pages(int d, int n_kv, int n_ctx, int block_size, const Spec& ks, const Spec& vs, std::mt19937& rng) {
  Pages p;
  p.d = d, p.n_kv = n_kv, p.n_ctx = n_ctx, p.block_size = block_size;
  const CodedRowFormat kf = format_for(ks, d), vf = format_for(vs, d);
  const size_t k_row = coded_row_bytes(kf) + 12, v_row = coded_row_bytes(vf);
  const int needed = (n_ctx + block_size - 1) / block_size;
  const int n_blocks = 2 * needed + 3;
  p.k = {nullptr, size_t(n_kv) * block_size * k_row, size_t(block_size) * k_row, k_row, kf};
  p.v = {nullptr, size_t(n_kv) * block_size * v_row, v_row, size_t(n_kv) * v_row, vf};
  p.k_pages.assign(n_blocks * p.k.block_stride, 0x7B);
  p.v_pages.assign(n_blocks * p.v.block_stride, 0x7B);
  p.k.base = p.k_pages.data();
  p.v.base = p.v_pages.data();
  std::vector<int32_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  p.block_table.assign(perm.begin(), perm.begin() + needed);

  std::uniform_real_distribution<float> mag(0.5f, 2.0f);
  p.k_dec.resize(size_t(n_ctx) * n_kv * d);
  p.v_dec.resize(p.k_dec.size());
  for (int t = 0; t < n_ctx; ++t) {
    const int32_t b = p.block_table[t / block_size];
    const int o = t % block_size;
    for (int g = 0; g < n_kv; ++g) {
      uint8_t* kr = p.k_pages.data() + b * p.k.block_stride + g * p.k.head_stride + o * p.k.row_stride;
      uint8_t* vr = p.v_pages.data() + b * p.v.block_stride + g * p.v.head_stride + o * p.v.row_stride;
      const std::vector<float> kx = random_vec(d, rng, mag(rng)), vx = random_vec(d, rng, mag(rng));
      encode_row(ks, d, kx.data(), kr);
      decode_coded_row_scalar(kf, kr, p.k_dec.data() + (size_t(t) * n_kv + g) * d);
      encode_row(vs, d, vx.data(), vr);
      decode_coded_row_scalar(vf, vr, p.v_dec.data() + (size_t(t) * n_kv + g) * d);
    }
  }
  return p;
}

inline PagedAttentionArgs make_args(const Pages& p, const float* q, int n_q, float* out) {
  PagedAttentionArgs a;
  a.q = q;
  a.n_q_heads = n_q;
  a.n_kv_heads = p.n_kv;
  a.head_dim = p.d;
  a.block_table = p.block_table.data();
  a.block_size = p.block_size;
  a.n_ctx = p.n_ctx;
  a.k = p.k;
  a.v = p.v;
  a.scale = 1.0f / std::sqrt(float(p.d));
  a.out = out;
  return a;
}

// Full-precision windows for query a (whose n_ctx is set): rows [0, sink) and its last `recent`
// rows from window pages w (data block b's copies in block window_of[b]), the rest coded.
inline void set_windows(PagedAttentionArgs& a, const Pages& w, const int32_t* window_of, int sink, int recent) {
  a.windows = true;
  a.window_k = w.k;
  a.window_v = w.v;
  a.window_k.block_map = a.window_v.block_map = window_of;
  a.coded_begin = std::min(sink, a.n_ctx);
  a.coded_end = std::max(a.coded_begin, a.n_ctx - recent);
}

// Max |a - b| relative to max |b| over the whole output.
inline float relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float diff = 0, mag = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    mag = std::max(mag, std::fabs(b[i]));
  }
  return mag > 0 ? diff / mag : diff;
}

// The three kernel entry points on the arguments `args(out)` builds: the exact scalar kernel and
// the fast one within 1e-5 of `ref`, the exact (SIMD) one bit-identical to the exact scalar one.
template <class MakeArgs>
void expect_kernels_match(const MakeArgs& args, const std::vector<float>& ref) {
  std::vector<float> scalar(ref.size()), exact(ref.size()), fast(ref.size());
  paged_attention_exact_scalar(args(scalar.data()));
  paged_attention_exact(args(exact.data()));
  paged_attention_fast(args(fast.data()));
  EXPECT_LE(relative_diff(scalar, ref), 1e-5f);
  EXPECT_EQ(0, std::memcmp(scalar.data(), exact.data(), scalar.size() * sizeof(float)));
  EXPECT_LE(relative_diff(fast, ref), 1e-5f);
}

}  // namespace tq::coded_test
