// Each CUDA kernel against the CPU kernel it stands for (kernels/*.h) or a double-precision
// reference, on fresh random inputs, with every output poisoned (NaN) before the launch.
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "cuda_test_support.h"
#include "errors/error.h"
#include "kernels/activation.h"
#include "kernels/coded_row.h"
#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/device_array.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/transformer_ops.h"
#include "kernels/cuda/tq_encode.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kv/kv_cache.h"
#include "quant/tq_row.h"

namespace tq {
namespace {

using cuda::DeviceArray;
using test::random_floats;
using test::relative_error;

DeviceArray<float> poisoned(size_t n) {
  DeviceArray<float> d(n);
  std::vector<float> nan(n, NAN);
  d.upload(nan);
  return d;
}

// host: [rows, cols] fp32, uploaded `chunk` rows at a time and rounded to `element` on the device.
cuda::DeviceMatrix device_matrix(cuda::Element element, int64_t rows, int64_t cols, const float* host, int64_t chunk) {
  cuda::DeviceMatrix m;
  m.element = element;
  m.rows = rows;
  m.cols = cols;
  m.data.resize(size_t(rows * cols) * cuda::element_bytes(element));
  DeviceArray<float> staging;
  for (int64_t first = 0; first < rows; first += chunk)
    cuda::upload_rows(m, first, std::min(chunk, rows - first), host + first * cols, staging, nullptr);
  return m;
}

// cuBLAS is opened at run time (not linked): the library and every function the backend calls are
// found here too, where no GPU is; without a GPU the handle's creation then fails by name.
TEST(CudaBlas, LoadsAtRunTime) {
  std::string why;
  const bool gpu = cuda::device_count(&why) > 0;
  try {
    cuda::Blas blas(nullptr);
    EXPECT_TRUE(gpu) << "a cuBLAS handle without a GPU";
  } catch (const Error& e) {
    EXPECT_FALSE(gpu) << e.what();
    EXPECT_NE(std::string(e.what()).find("cublasCreate: cuBLAS status"), std::string::npos) << e.what();
  }
}

TEST(CudaKernels, RmsNormMatchesCpu) {
  TQ_REQUIRE_CUDA();
  for (int d : {8, 64, 576, 2560}) {
    const int rows = 37;
    const auto x = random_floats(size_t(rows) * d, 1 + d, 3.0f), w = random_floats(d, 2 + d);
    std::vector<float> want(x.size());
    rms_norm(x.data(), w.data(), rows, d, 1e-6f, want.data());
    DeviceArray<float> dx, dw;
    dx.upload(x);
    dw.upload(w);
    DeviceArray<float> dy = poisoned(x.size());
    cuda::rms_norm(dx.data(), dw.data(), rows, d, 1e-6f, dy.data(), nullptr);
    EXPECT_LE(relative_error(dy.to_host(), want), 1e-6) << "d " << d;
    cuda::rms_norm(dx.data(), dw.data(), rows, d, 1e-6f, dx.data(), nullptr);  // in place
    EXPECT_LE(relative_error(dx.to_host(), want), 1e-6) << "in place, d " << d;
  }
}

TEST(CudaKernels, RopeMatchesCpuInBothPairings) {
  TQ_REQUIRE_CUDA();
  const int n = 9, heads = 5, head_dim = 128;
  const auto inv_freq = rope_base_inv_freq(head_dim, 1e6);
  const std::vector<int32_t> positions = {0, 1, 2, 17, 511, 4095, 8191, 32767, 40000};
  for (RopePairing pairing : {RopePairing::Half, RopePairing::Adjacent}) {
    const auto x = random_floats(size_t(n) * heads * head_dim, 7);
    std::vector<float> want = x;
    for (int t = 0; t < n; ++t) apply_rope(want.data() + size_t(t) * heads * head_dim, heads, head_dim, positions[t], inv_freq.data(), pairing);
    DeviceArray<float> dx, df;
    DeviceArray<int32_t> dp;
    dx.upload(x);
    df.upload(inv_freq);
    dp.upload(positions);
    cuda::rope(dx.data(), n, heads, head_dim, dp.data(), df.data(), pairing, nullptr);
    // cosf/sinf of the same fp32 angle: within an ulp or two of the C library's.
    EXPECT_LE(relative_error(dx.to_host(), want), 2e-6) << (pairing == RopePairing::Half ? "half" : "adjacent");
  }
}

TEST(CudaKernels, SiluMulMatchesCpu) {
  TQ_REQUIRE_CUDA();
  const size_t n = 100003;
  const auto gate = random_floats(n, 11, 4.0f), up = random_floats(n, 12);
  std::vector<float> want(n);
  silu_mul_reference(gate.data(), up.data(), n, want.data());
  DeviceArray<float> dg, du;
  dg.upload(gate);
  du.upload(up);
  DeviceArray<float> out = poisoned(n);
  cuda::silu_mul(dg.data(), du.data(), n, out.data(), nullptr);
  EXPECT_LE(relative_error(out.to_host(), want), 1e-6);
  cuda::add_in_place(dg.data(), du.data(), n, nullptr);
  std::vector<float> sum(n);
  for (size_t i = 0; i < n; ++i) sum[i] = gate[i] + up[i];
  EXPECT_EQ(dg.to_host(), sum);
}

// y = x · Wᵀ + b through cuBLAS for each element type, against a double product of the values the
// device holds (rounded on the host for f16 and bf16 the same way).
TEST(CudaKernels, LinearMatchesDoubleProduct) {
  TQ_REQUIRE_CUDA();
  const int64_t out = 300, in = 576, n = 7;
  const auto w = random_floats(size_t(out * in), 21, 0.05f), x = random_floats(size_t(n * in), 22), b = random_floats(out, 23);
  cuda::Blas blas(nullptr);
  for (auto [element, tolerance] : {std::pair{cuda::Element::F32, 1e-6}, std::pair{cuda::Element::F16, 2e-3},
                                    std::pair{cuda::Element::BF16, 1.5e-2}}) {
    cuda::DeviceMatrix m = device_matrix(element, out, in, w.data(), 100);
    m.bias.upload(b);
    DeviceArray<float> dx;
    dx.upload(x);
    DeviceArray<float> y = poisoned(size_t(n * out));
    DeviceArray<uint8_t> scratch;
    cuda::linear(blas, m, dx.data(), n, y.data(), scratch);
    std::vector<double> want(size_t(n * out));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < out; ++r) {
        double s = b[r];
        for (int64_t i = 0; i < in; ++i) s += double(x[t * in + i]) * double(w[r * in + i]);
        want[t * out + r] = s;
      }
    EXPECT_LE(relative_error(y.to_host(), want), tolerance) << cuda::element_name(element);
  }
}

TEST(CudaKernels, EmbedRowsGathersAndWidens) {
  TQ_REQUIRE_CUDA();
  const int64_t rows = 50, cols = 96;
  const auto table = random_floats(size_t(rows * cols), 31);
  const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
  for (cuda::Element element : {cuda::Element::F32, cuda::Element::F16, cuda::Element::BF16}) {
    const cuda::DeviceMatrix m = device_matrix(element, rows, cols, table.data(), rows);
    DeviceArray<int32_t> dids;
    dids.upload(ids);
    DeviceArray<float> x = poisoned(ids.size() * cols);
    cuda::embed_rows(m.data.data(), element, cols, dids.data(), static_cast<int>(ids.size()), x.data(), nullptr);
    const auto got = x.to_host();
    const double tolerance = element == cuda::Element::F32 ? 0 : element == cuda::Element::F16 ? 1e-3 : 8e-3;
    for (size_t t = 0; t < ids.size(); ++t)
      for (int64_t c = 0; c < cols; ++c) {
        const float want = table[ids[t] * cols + c];
        ASSERT_LE(std::fabs(got[t * cols + c] - want), tolerance * std::fabs(want) + 1e-30)
            << cuda::element_name(element) << " token " << t << " col " << c;
      }
  }
}

// Three sequences with scattered block ids, prefill-like and decode-like tokens in one batch:
// the stored rows land where the block tables say, and attention equals a double-precision
// softmax over the rows as stored.
TEST(CudaKernels, PagedAttentionMatchesDoubleReference) {
  TQ_REQUIRE_CUDA();
  for (cuda::Element element : {cuda::Element::F32, cuda::Element::F16}) {
    for (auto [n_q, n_kv, d, bs] : {std::tuple{8, 4, 8, 16}, std::tuple{16, 8, 128, 16}, std::tuple{9, 3, 64, 7}}) {
      const int num_blocks = 64;
      const std::vector<std::vector<int32_t>> tables = {{5, 2, 60, 7, 33, 34, 35, 1, 50, 51, 52, 53, 54, 55, 56, 57},
                                                        {0},
                                                        {40, 41, 3, 4, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}};
      const std::vector<int> lengths = {std::min(100, bs * 16), 1, std::min(200, bs * 16)};
      // Every position of every sequence is written in one step (its tokens in order).
      std::vector<int32_t> positions, table_begin, flat;
      std::vector<int> seq_of;
      for (size_t s = 0; s < tables.size(); ++s) {
        const int begin = static_cast<int>(flat.size());
        flat.insert(flat.end(), tables[s].begin(), tables[s].end());
        for (int p = 0; p < lengths[s]; ++p) {
          positions.push_back(p);
          table_begin.push_back(begin);
          seq_of.push_back(static_cast<int>(s));
        }
      }
      const int T = static_cast<int>(positions.size());
      const auto k = random_floats(size_t(T) * n_kv * d, 41), v = random_floats(size_t(T) * n_kv * d, 42),
                 q = random_floats(size_t(T) * n_q * d, 43);
      DeviceArray<float> dk, dv, dq;
      dk.upload(k);
      dv.upload(v);
      dq.upload(q);
      DeviceArray<int32_t> dpos, dbegin, dflat;
      dpos.upload(positions);
      dbegin.upload(table_begin);
      dflat.upload(flat);
      const cuda::KvPageShape shape{n_kv, d, bs, element};
      const size_t page_elements = size_t(num_blocks) * n_kv * bs * d, eb = cuda::element_bytes(element);
      DeviceArray<uint8_t> kp(page_elements * eb), vp(page_elements * eb);
      const cuda::TokenSlots slots{T, dpos.data(), dbegin.data(), dflat.data()};
      cuda::store_kv_rows(shape, slots, dk.data(), dv.data(), kp.data(), vp.data(), nullptr);
      const float scale = 1.0f / std::sqrt(float(d));
      const int max_ctx = *std::max_element(positions.begin(), positions.end()) + 1;
      // Parts of 256 rows (every context here in one part, up to 7 tiles of 32 spread over the
      // block's warps) and of 32 and 40 (several parts to combine, partial tiles).
      std::vector<std::vector<float>> outs;
      for (int part_rows : {256, 32, 40}) {
        DeviceArray<float> out = poisoned(size_t(T) * n_q * d);
        cuda::AttentionScratch scratch;
        cuda::paged_attention(shape, slots, n_q, max_ctx, dq.data(), kp.data(), vp.data(), scale, out.data(), scratch,
                              nullptr, part_rows);
        outs.push_back(out.to_host());
      }
      const auto kb = kp.to_host(), vb = vp.to_host();
      const auto page_value = [&](const std::vector<uint8_t>& pages, size_t i) -> double {
        if (element == cuda::Element::F32) {
          float f;
          std::memcpy(&f, pages.data() + 4 * i, 4);
          return f;
        }
        __half h;
        std::memcpy(&h, pages.data() + 2 * i, 2);
        return __half2float(h);
      };
      const auto row_index = [&](int t, int p, int g) {
        const int32_t block = flat[table_begin[t] + p / bs];
        return ((size_t(block) * n_kv + g) * bs + p % bs) * d;
      };
      std::vector<double> want(size_t(T) * n_q * d);
      for (int t = 0; t < T; ++t) {
        for (int g = 0; g < n_kv; ++g)  // the row is where the table says, as written
          for (int i = 0; i < d; ++i) {
            const double stored = page_value(kb, row_index(t, positions[t], g) + i);
            ASSERT_NEAR(stored, k[(size_t(t) * n_kv + g) * d + i], element == cuda::Element::F32 ? 0.0 : 2e-3 * std::fabs(stored) + 1e-6);
          }
        for (int h = 0; h < n_q; ++h) {
          const int g = h / (n_q / n_kv);
          std::vector<double> scores(positions[t] + 1);
          double top = -INFINITY;
          for (int p = 0; p <= positions[t]; ++p) {
            double s = 0;
            for (int i = 0; i < d; ++i) s += double(q[(size_t(t) * n_q + h) * d + i]) * page_value(kb, row_index(t, p, g) + i);
            scores[p] = s * scale;
            top = std::max(top, scores[p]);
          }
          double total = 0;
          for (double& s : scores) total += (s = std::exp(s - top));
          for (int i = 0; i < d; ++i) {
            double acc = 0;
            for (int p = 0; p <= positions[t]; ++p) acc += scores[p] * page_value(vb, row_index(t, p, g) + i);
            want[(size_t(t) * n_q + h) * d + i] = acc / total;
          }
        }
      }
      for (size_t i = 0; i < outs.size(); ++i)
        EXPECT_LE(relative_error(outs[i], want), 1e-5) << cuda::element_name(element) << " heads " << n_q << "/"
                                                        << n_kv << " d " << d << " blocks of " << bs << " parts " << i;
    }
  }
}

// 4-bit TurboQuant rows coded by the CPU cache (kv/kv_cache.h, tq4 and tq4h: fp32 and fp16
// scales), its pages copied to the GPU as they are: attention in storage space equals a double
// softmax over the rows as the CPU decodes them (kernels/coded_row.h).
TEST(CudaKernels, TurboQuant4AttentionMatchesDoubleReference) {
  TQ_REQUIRE_CUDA();
  for (KvDtype dtype : {KvDtype::TQ4, KvDtype::TQ4H}) {
    for (auto [n_q, n_kv, d, bs] : {std::tuple{16, 8, 128, 16}, std::tuple{9, 3, 64, 7}}) {
      const int num_blocks = 40, layer = 1;
      KvCache cache({2, n_kv, d, bs, dtype, dtype}, num_blocks);
      std::vector<BlockTable> tables(2);
      tables[0].blocks = {7, 3, 30, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28};
      tables[1].blocks = {0, 39, 38, 1, 2, 4, 5, 6, 8, 9, 10, 11, 31, 32, 33, 34, 35, 36, 37, 29};
      const std::vector<int> lengths = {std::min(130, bs * 20), std::min(75, bs * 20)};
      std::vector<int32_t> positions, table_begin, flat;
      for (size_t s = 0; s < tables.size(); ++s) {
        const int begin = static_cast<int>(flat.size());
        flat.insert(flat.end(), tables[s].blocks.begin(), tables[s].blocks.end());
        for (int p = 0; p < lengths[s]; ++p) {
          const auto k = random_floats(size_t(n_kv) * d, 1000 * s + p), v = random_floats(size_t(n_kv) * d, 5000 * s + p);
          cache.write(layer, tables[s], p, k.data(), v.data());
          positions.push_back(p);
          table_begin.push_back(begin);
        }
      }
      const int T = static_cast<int>(positions.size());
      const PagedRows kp = cache.k_pages(layer), vp = cache.v_pages(layer);
      const cuda::Tq4PageShape shape{n_kv, d, bs, dtype == KvDtype::TQ4H};
      ASSERT_EQ(kp.row_stride, size_t(cuda::tq4_row_bytes(shape)));
      ASSERT_EQ(kp.block_stride, kp.row_stride * bs * n_kv);  // the layout the kernel assumes
      const size_t layer_bytes = kp.block_stride * num_blocks;
      DeviceArray<uint8_t> dk, dv;
      dk.upload(kp.base, layer_bytes);
      dv.upload(vp.base, layer_bytes);
      DeviceArray<float> k_levels, v_levels;
      k_levels.upload(kp.format.levels, 16);
      v_levels.upload(vp.format.levels, 16);
      const auto q = random_floats(size_t(T) * n_q * d, 77);
      DeviceArray<float> dq;
      dq.upload(q);
      DeviceArray<int32_t> dpos, dbegin, dflat;
      dpos.upload(positions);
      dbegin.upload(table_begin);
      dflat.upload(flat);
      const cuda::TokenSlots slots{T, dpos.data(), dbegin.data(), dflat.data()};
      const float scale = 1.0f / std::sqrt(float(d));
      const int max_ctx = *std::max_element(positions.begin(), positions.end()) + 1;
      // The rows as the CPU decodes them, then a double softmax.
      const auto decoded = [&](const PagedRows& pages, int t, int p, int g) {
        const int32_t block = flat[table_begin[t] + p / bs];
        std::vector<float> row(d);
        decode_coded_row_scalar(pages.format, pages.base + block * pages.block_stride + g * pages.head_stride +
                                                  (p % bs) * pages.row_stride, row.data());
        return row;
      };
      std::vector<double> want(size_t(T) * n_q * d);
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < n_q; ++h) {
          const int g = h / (n_q / n_kv);
          std::vector<double> w(positions[t] + 1);
          double top = -INFINITY, total = 0;
          for (int p = 0; p <= positions[t]; ++p) {
            const auto k = decoded(kp, t, p, g);
            double s = 0;
            for (int i = 0; i < d; ++i) s += double(q[(size_t(t) * n_q + h) * d + i]) * k[i];
            top = std::max(top, w[p] = s * scale);
          }
          for (double& x : w) total += (x = std::exp(x - top));
          for (int p = 0; p <= positions[t]; ++p) {
            const auto v = decoded(vp, t, p, g);
            for (int i = 0; i < d; ++i) want[(size_t(t) * n_q + h) * d + i] += w[p] / total * v[i];
          }
        }
      for (int part_rows : {256, 48}) {
        DeviceArray<float> out = poisoned(size_t(T) * n_q * d);
        cuda::AttentionScratch scratch;
        cuda::tq4_paged_attention(shape, slots, n_q, max_ctx, dq.data(), dk.data(), k_levels.data(), dv.data(),
                                  v_levels.data(), scale, out.data(), scratch, nullptr, part_rows);
        EXPECT_LE(relative_error(out.to_host(), want), 1e-5) << kv_dtype_name(dtype) << " heads " << n_q << "/" << n_kv
                                                            << " d " << d << " parts of " << part_rows;
      }
    }
  }
}

cuda::Tq4ScaleRule scale_rule(TqScaleMode mode) {
  switch (mode) {
    case TqScaleMode::plain_norm: return cuda::Tq4ScaleRule::Norm;
    case TqScaleMode::norm_corrected: return cuda::Tq4ScaleRule::NormCorrected;
    case TqScaleMode::least_squares: return cuda::Tq4ScaleRule::LeastSquares;
  }
  return cuda::Tq4ScaleRule::LeastSquares;
}

// K and V rows coded by the GPU (store_tq4_rows) are byte for byte the rows the CPU cache codes
// from the same values: tq4 and tq4h, keys with a per-head center, every scale rule.
TEST(CudaKernels, TurboQuant4RowsAreCodedAsTheCpuCodesThem) {
  TQ_REQUIRE_CUDA();
  const int n_kv = 3, d = 128, bs = 16, num_blocks = 8, layers = 2, layer = 1;
  for (KvDtype dtype : {KvDtype::TQ4, KvDtype::TQ4H}) {
    for (const char* rule : {"least-squares", "norm-corrected", "norm"}) {
      KvAffine affine;
      affine.k_mean.assign(layers, std::vector<std::vector<float>>(n_kv));
      for (int g = 0; g < n_kv; ++g) affine.k_mean[layer][g] = random_floats(d, 900 + g, 0.3f);
      affine.k_mean[0] = affine.k_mean[layer];
      KvQuantOptions options;
      options.scale_mode = parse_tq_scale_mode(rule);
      KvCache cache({layers, n_kv, d, bs, dtype, dtype}, num_blocks, options, {}, affine);
      BlockTable table;
      table.blocks = {5, 2, 7};
      const int T = 40;
      // Rows of every kind: ordinary, large, tiny, and all zeros (the zero-norm path).
      std::vector<float> k = random_floats(size_t(T) * n_kv * d, 31), v = random_floats(size_t(T) * n_kv * d, 32, 5.0f);
      for (int i = 0; i < d; ++i) v[size_t(3) * n_kv * d + i] *= 1e-20f;  // V: no center to add back
      for (int i = 0; i < n_kv * d; ++i) v[size_t(4) * n_kv * d + i] = 0.0f;
      std::vector<int32_t> positions(T), begin(T, 0);
      for (int p = 0; p < T; ++p) {
        positions[p] = p;
        cache.write(layer, table, p, k.data() + size_t(p) * n_kv * d, v.data() + size_t(p) * n_kv * d);
      }
      const cuda::Tq4PageShape shape{n_kv, d, bs, dtype == KvDtype::TQ4H};
      for (bool keys : {true, false}) {
        const KvRowCodec& codec = keys ? cache.k_codec(layer) : cache.v_codec(layer);
        const PagedRows pages = keys ? cache.k_pages(layer) : cache.v_pages(layer);
        DeviceArray<float> rotation, boundaries, levels, center, x;
        rotation.upload(codec.rotation().to_matrix());
        boundaries.upload(codec.codebook().boundaries);
        levels.upload(codec.codebook().centroids);
        std::vector<float> centers;
        for (int g = 0; g < n_kv; ++g)
          if (codec.center(g)) centers.insert(centers.end(), codec.center(g), codec.center(g) + d);
        ASSERT_EQ(centers.size(), keys ? size_t(n_kv) * d : 0u);
        center.upload(centers);
        x.upload(keys ? k : v);
        DeviceArray<int32_t> dpos, dbegin, dtable;
        dpos.upload(positions);
        dbegin.upload(begin);
        dtable.upload(table.blocks);
        const size_t layer_bytes = pages.block_stride * num_blocks;
        DeviceArray<uint8_t> gpu_pages;
        gpu_pages.upload(std::vector<uint8_t>(layer_bytes, 0xAB));
        const cuda::Tq4Coding coding{rotation.data(), boundaries.data(), levels.data(),
                                     centers.empty() ? nullptr : center.data(),
                                     scale_rule(options.scale_mode)};
        cuda::store_tq4_rows(shape, coding, {T, dpos.data(), dbegin.data(), dtable.data()}, x.data(), gpu_pages.data(),
                             nullptr);
        const std::vector<uint8_t> got = gpu_pages.to_host();
        for (int p = 0; p < T; ++p)
          for (int g = 0; g < n_kv; ++g) {
            const size_t at = table.blocks[p / bs] * pages.block_stride + g * pages.head_stride + (p % bs) * pages.row_stride;
            ASSERT_EQ(0, std::memcmp(got.data() + at, pages.base + at, pages.row_stride))
                << kv_dtype_name(dtype) << " " << rule << (keys ? " K" : " V") << " position " << p << " head " << g;
          }
      }
    }
  }
}

}  // namespace
}  // namespace tq
