// Quantized KV cache pages: the q8_0 / q4_0 baselines against an independent copy of ggml's
// reference quantizers; dtype names, checks and row sizes; every stored TurboQuant row keeps its
// norm; reconstruction error per dtype against the paper's distortion; storage space (to_storage /
// from_storage, dot products invariant); protected layers; outlier_order; and what the outlier
// order buys the split dtypes on keys shaped like Qwen2/3's.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/kv_calibration.h"
#include "errors/error.h"
#include "kernels/paged_attention.h"
#include "kernels/coded_row.h"
#include "kernels/dequantize.h"
#include "kernels/rope.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "kv/kv_dtype.h"
#include "kv/kv_row_codec.h"
#include "quant/baseline_quant.h"

namespace tq {
namespace {

const std::vector<KvDtype> kAllDtypes = {KvDtype::F32,  KvDtype::BF16, KvDtype::F16, KvDtype::Q8_0,
                                         KvDtype::Q4_0, KvDtype::Q4_0H, KvDtype::TQ4, KvDtype::TQ3,
                                         KvDtype::TQ2,  KvDtype::TQ3_5, KvDtype::TQ2_5, KvDtype::TQ4H,
                                         KvDtype::TQ3H, KvDtype::TQ2H, KvDtype::TQ4P, KvDtype::TQ3O,
                                         KvDtype::TQ2O};

std::vector<float> random_vec(size_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (float& e : v) e = normal(rng);
  return v;
}

double norm2(const float* x, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += double(x[i]) * x[i];
  return s;
}

double dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += double(a[i]) * b[i];
  return s;
}

double rel_sq_error(const float* x, const float* xhat, int n) {
  double e = 0;
  for (int i = 0; i < n; ++i) e += double(x[i] - xhat[i]) * (x[i] - xhat[i]);
  return e / norm2(x, n);
}

// ---------------------------------------------------------------------------------------------
// An independent copy of ggml's reference quantizers (ggml-quants.c, quantize_row_q8_0_ref and
// quantize_row_q4_0_ref) with ggml's portable fp32 -> fp16 conversion (ggml-impl.h,
// ggml_compute_fp32_to_fp16, from the FP16 library: round to nearest even).

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

uint16_t ggml_fp32_to_fp16(float f) {
  const float scale_to_inf = 0x1.0p+112f, scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = bits_of(f), shl1_w = w + w, sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = float_of((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = bits_of(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u, mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return uint16_t((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

void ref_quantize_q8_0(const float* x, int k, uint8_t* y) {  // block_q8_0 { ggml_half d; int8_t qs[32]; }
  for (int i = 0; i < k / 32; ++i, y += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[i * 32 + j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    const uint16_t h = ggml_fp32_to_fp16(d);
    std::memcpy(y, &h, 2);
    for (int j = 0; j < 32; ++j) {
      const int8_t q = int8_t(std::roundf(x[i * 32 + j] * id));
      std::memcpy(y + 2 + j, &q, 1);
    }
  }
}

void ref_quantize_q4_0(const float* x, int k, uint8_t* y) {  // block_q4_0 { ggml_half d; uint8_t qs[16]; }
  for (int i = 0; i < k / 32; ++i, y += 18) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float v = x[i * 32 + j];
      if (amax < std::fabs(v)) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    const uint16_t h = ggml_fp32_to_fp16(d);
    std::memcpy(y, &h, 2);
    for (int j = 0; j < 16; ++j) {
      const float x0 = x[i * 32 + j] * id, x1 = x[i * 32 + 16 + j] * id;
      const uint8_t xi0 = std::min<int8_t>(15, int8_t(x0 + 8.5f)), xi1 = std::min<int8_t>(15, int8_t(x1 + 8.5f));
      y[2 + j] = uint8_t(xi0 | (xi1 << 4));
    }
  }
}

// Rows that probe the edge cases: Gaussian blocks over many magnitudes, an all-zero block, the
// extreme value negative / positive / tied in magnitude, exact .5 ties of q8_0's rounding, tiny
// values (fp16 scale subnormal or zero) and large ones.
std::vector<std::vector<float>> baseline_rows(std::mt19937& rng) {
  std::vector<std::vector<float>> rows;
  for (float sigma : {1e-3f, 0.1f, 1.0f, 7.0f, 300.0f}) {
    for (int r = 0; r < 20; ++r) rows.push_back(random_vec(128, rng, sigma));
  }
  std::vector<float> edge(128, 0.0f);  // block 0 all zero
  for (int j = 0; j < 32; ++j) edge[32 + j] = float(j) - 20.0f;        // extreme -20, negative
  for (int j = 0; j < 32; ++j) edge[64 + j] = (j % 2 ? -3.0f : 3.0f);  // tie: first (+3) wins
  for (int j = 0; j < 32; ++j) edge[96 + j] = 0.5f + float(j) - 16.0f;
  edge[96 + 31] = 127.0f;  // d = 1: every other value is an exact .5 tie for q8_0
  rows.push_back(edge);
  std::vector<float> tiny = random_vec(64, rng, 1e-6f), tinier = random_vec(64, rng, 1e-9f);
  tiny.insert(tiny.end(), tinier.begin(), tinier.end());
  rows.push_back(tiny);
  rows.push_back(random_vec(96, rng, 2e4f));
  return rows;
}

// The library's quantizer writes the reference's bytes; dequantize_row and the KV row decoder
// read them back identically.
void check_baseline(void (*quant)(const float*, int, uint8_t*), void (*ref)(const float*, int, uint8_t*),
                    size_t block_bytes, DType type, RowCodec codec, std::mt19937& rng) {
  for (const std::vector<float>& x : baseline_rows(rng)) {
    const int n = int(x.size());
    std::vector<uint8_t> got(n / 32 * block_bytes, 0xEE), want(got.size(), 0x11);
    quant(x.data(), n, got.data());
    ref(x.data(), n, want.data());
    ASSERT_EQ(got, want) << "first value " << x[0];
    std::vector<float> a(n), b(n);
    dequantize_row(type, got.data(), a.data(), n);
    CodedRowFormat f;
    f.codec = codec;
    f.dim = n;
    decode_coded_row_scalar(f, got.data(), b.data());
    ASSERT_EQ(a, b);
  }
}

TEST(BaselineQuant, MatchesGgmlReference) {
  std::mt19937 rng(80);
  for (float v : {0.0f, 1e-8f, 6e-8f, 3e-5f, 0.1f, 0.33333f, 1.0f, 2047.5f, 65504.0f, 65520.0f, 1e6f})
    for (float s : {v, -v}) ASSERT_EQ(ggml_fp32_to_fp16(s), fp32_to_fp16(s)) << s;  // the two fp16 roundings agree
  check_baseline(quantize_row_q8_0, ref_quantize_q8_0, 34, DType::Q8_0, RowCodec::Q8_0, rng);
  check_baseline(quantize_row_q4_0, ref_quantize_q4_0, 18, DType::Q4_0, RowCodec::Q4_0, rng);
  // By hand: block [-8, -7, ..., 23]: max = 23 -> d = -23/8, the extreme value maps to code 0,
  // -8 to code min(15, int(8/(23/8) + 8.5)) = 11.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = float(j) - 8.0f;
  uint8_t row[18];
  quantize_row_q4_0(x.data(), 32, row);
  EXPECT_EQ(fp16_to_fp32(uint16_t(row[0] | row[1] << 8)), fp16_to_fp32(fp32_to_fp16(-23.0f / 8)));
  EXPECT_EQ(row[2] & 15, 11);
  EXPECT_EQ(row[2 + 15] >> 4, 0);
  EXPECT_THROW(quantize_row_q8_0(nullptr, 48, nullptr), Error);
  EXPECT_THROW(quantize_row_q4_0(nullptr, 0, nullptr), Error);
}

// ---------------------------------------------------------------------------------------------
// Dtype names, checks and sizes

TEST(KvDtypeQuant, NamesAndChoices) {
  EXPECT_EQ(kv_dtype_choices(), "f32, bf16, f16, q8_0, q4_0, q4_0h, tq4, tq3, tq2, tq3.5, tq2.5, tq4h, tq3h, tq2h, tq4c, tq3c, tq2c, tq4p, tq3o, tq2o");
  for (KvDtype d : kAllDtypes) {
    const auto parsed = parse_kv_dtype(kv_dtype_name(d));
    ASSERT_TRUE(parsed.has_value()) << kv_dtype_name(d);
    EXPECT_EQ(*parsed, d);
    EXPECT_NE(kv_dtype_choices().find(kv_dtype_name(d)), std::string::npos);
  }
  for (const char* bad : {"tq5", "tq1", "q4_1", "tq3.0", "TQ4", "", "q8"}) EXPECT_FALSE(parse_kv_dtype(bad)) << bad;
  EXPECT_EQ(parse_kv_dtype("float16"), KvDtype::F16);
  EXPECT_TRUE(kv_dtype_is_split(KvDtype::TQ2_5));
  EXPECT_FALSE(kv_dtype_is_tq(KvDtype::Q4_0H));
  EXPECT_TRUE(kv_dtype_is_rotated(KvDtype::Q4_0H));
  EXPECT_EQ(kv_dtype_tq_bits(KvDtype::TQ3_5), std::make_pair(4, 3));
  EXPECT_EQ(kv_dtype_tq_bits(KvDtype::TQ2_5), std::make_pair(3, 2));
}

TEST(KvDtypeQuant, RowBytes) {
  // tq3.5 d=64: 16 + 12 bytes of codes, two fp16 scales; tq2.5 d=128: 24 + 16, two fp16 scales.
  const std::vector<std::tuple<KvDtype, int, size_t>> sizes = {
      {KvDtype::TQ4, 128, 68},   {KvDtype::TQ3, 128, 52},  {KvDtype::TQ2, 128, 36},  {KvDtype::TQ3_5, 64, 32},
      {KvDtype::TQ2_5, 128, 44}, {KvDtype::Q8_0, 64, 68},  {KvDtype::Q4_0, 64, 36},  {KvDtype::Q4_0H, 64, 36},
      {KvDtype::F16, 64, 128},   {KvDtype::BF16, 64, 128}, {KvDtype::F32, 64, 256},  {KvDtype::TQ4H, 64, 34},
      {KvDtype::TQ3H, 64, 26},   {KvDtype::TQ2H, 128, 34}, {KvDtype::TQ4P, 64, 34},  {KvDtype::TQ3O, 64, 26},
      {KvDtype::TQ2O, 128, 34}};
  for (const auto& [dt, d, bytes] : sizes) EXPECT_EQ(kv_row_bytes(dt, d), bytes) << kv_dtype_name(dt) << " d=" << d;
  EXPECT_DOUBLE_EQ(kv_bits_per_element(KvDtype::TQ4, 128), 4.25);
  EXPECT_DOUBLE_EQ(kv_bits_per_element(KvDtype::TQ4H, 64), 4.25);
  EXPECT_DOUBLE_EQ(kv_bits_per_element(KvDtype::TQ3_5, 128), 3.75);
  EXPECT_DOUBLE_EQ(kv_bits_per_element(KvDtype::Q8_0, 128), 8.5);
  // The codec and its row format agree with kv_row_bytes.
  for (KvDtype d : kAllDtypes) {
    const KvRowCodec codec(d, 128, 0, KvQuantOptions{});
    EXPECT_EQ(codec.row_bytes(), kv_row_bytes(d, 128)) << kv_dtype_name(d);
    EXPECT_EQ(coded_row_bytes(codec.row_format()), kv_row_bytes(d, 128)) << kv_dtype_name(d);
  }
}

std::string check_message(KvDtype dtype, int head_dim, bool hadamard) {
  try {
    check_kv_dtype(dtype, head_dim, hadamard);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KvDtypeQuant, CheckFailuresNameAnAlternative) {
  const std::string q4h = check_message(KvDtype::Q4_0H, 96, false);
  EXPECT_NE(q4h.find("q4_0h"), std::string::npos) << q4h;
  EXPECT_NE(q4h.find("use q4_0"), std::string::npos) << q4h;
  const std::string tq = check_message(KvDtype::TQ4, 96, true);
  EXPECT_NE(tq.find("tq4"), std::string::npos) << tq;
  EXPECT_NE(tq.find("--tq-rotation dense"), std::string::npos) << tq;
  EXPECT_EQ(check_message(KvDtype::TQ4, 96, false), "");
  EXPECT_EQ(check_message(KvDtype::Q4_0, 96, false), "");
  EXPECT_NE(check_message(KvDtype::TQ3_5, 96, true), "");  // halves of 48
  EXPECT_EQ(check_message(KvDtype::TQ3_5, 128, true), "");
  const std::string q8 = check_message(KvDtype::Q8_0, 48, false);
  EXPECT_NE(q8.find("multiple of 32"), std::string::npos) << q8;
  EXPECT_NE(q8.find("f16"), std::string::npos) << q8;
  EXPECT_NE(check_message(KvDtype::TQ3, 36, false), "");  // 3 bits need a multiple of 8
  EXPECT_NE(check_message(KvDtype::F16, 0, false), "");
  EXPECT_EQ(check_message(KvDtype::F16, 36, true), "");
  EXPECT_THROW(KvRowCodec(KvDtype::Q4_0H, 96, 0, KvQuantOptions{}), Error);
  EXPECT_THROW(KvCache(KvCacheShape{1, 1, 96, 16, KvDtype::TQ4, KvDtype::TQ4}, 1,
                       KvQuantOptions{RotationKind::hadamard}),
               Error);
}

// ---------------------------------------------------------------------------------------------
// The cache stores every row's norm

TEST(KvQuantizedCache, EveryRowKeepsItsNorm) {
  const int layers = 3, heads = 2, n_tokens = 45;
  std::mt19937 rng(16);
  std::uniform_real_distribution<float> mag(0.3f, 3.0f);
  for (KvDtype dtype : {KvDtype::TQ4, KvDtype::TQ3, KvDtype::TQ2, KvDtype::TQ3_5, KvDtype::TQ2_5}) {
    for (int d : {128, 64}) {
      for (RotationKind rot : {RotationKind::dense, RotationKind::hadamard}) {
        SCOPED_TRACE(std::string(kv_dtype_name(dtype)) + " d=" + std::to_string(d) + " " +
                     std::string(rotation_kind_name(rot)));
        KvQuantOptions opts;
        opts.rotation = rot;
        opts.scale_mode = TqScaleMode::norm_corrected;  // the mode whose decoded norm is exact
        KvCache cache(KvCacheShape{layers, heads, d, 16, dtype, dtype}, 8, opts);
        BlockPool pool(cache);
        BlockTable other, table;
        ASSERT_TRUE(pool.allocate(other, 20));  // so this sequence's blocks are not 0, 1, 2
        ASSERT_TRUE(pool.allocate(table, n_tokens));
        std::vector<std::vector<std::vector<float>>> ks(layers), vs(layers);  // [layer][position][heads * d]
        for (int l = 0; l < layers; ++l) {
          for (int t = 0; t < n_tokens; ++t) {
            // The slot first holds a row 1000x larger, so a scale left unwritten shows.
            const std::vector<float> big = random_vec(size_t(heads) * d, rng, 1000.0f);
            cache.write(l, table, t, big.data(), big.data());
            ks[l].push_back(random_vec(size_t(heads) * d, rng));
            vs[l].push_back(random_vec(size_t(heads) * d, rng));
            for (int h = 0; h < heads; ++h) {
              const float km = mag(rng), vm = mag(rng);
              for (int j = 0; j < d; ++j) ks[l][t][h * d + j] *= km, vs[l][t][h * d + j] *= vm;
            }
            cache.write(l, table, t, ks[l][t].data(), vs[l][t].data());
          }
        }
        std::vector<float> k(size_t(heads) * d), v(k.size());
        int bad = 0;
        for (int l = 0; l < layers; ++l) {
          for (int t = 0; t < n_tokens; ++t) {
            cache.read(l, table, t, k.data(), v.data());
            for (int h = 0; h < heads; ++h) {
              for (auto [x, xhat] : {std::pair{ks[l][t].data(), k.data()}, std::pair{vs[l][t].data(), v.data()}}) {
                const double n_in = std::sqrt(norm2(x + h * d, d)), n_out = std::sqrt(norm2(xhat + h * d, d));
                if (std::fabs(n_out - n_in) > 1e-3 * n_in) {
                  if (++bad <= 5) ADD_FAILURE() << "layer " << l << " position " << t << " head " << h << ": norm "
                                                << n_out << ", written " << n_in;
                }
              }
            }
          }
        }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Distortion

// Mean relative squared error ||x - xhat||^2 / ||x||^2 of `rows` Gaussian rows through a codec.
double mean_rel_error(KvDtype dtype, int d, int rows, const KvQuantOptions& opts, std::mt19937& rng) {
  const KvRowCodec codec(dtype, d, 3, opts);
  std::vector<uint8_t> row(codec.row_bytes());
  std::vector<float> xhat(d);
  double sum = 0;
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> x = random_vec(d, rng, 0.5f);
    codec.encode(x.data(), 0, row.data());
    codec.decode(row.data(), 0, xhat.data());
    sum += rel_sq_error(x.data(), xhat.data(), d);
  }
  return sum / rows;
}

TEST(KvQuantizedCache, ReconstructionErrorMatchesPaper) {
  std::mt19937 rng(2024);
  const int d = 128, rows = 3000;
  std::map<KvDtype, double> err;
  KvQuantOptions norm_corrected;
  norm_corrected.scale_mode = TqScaleMode::norm_corrected;
  for (KvDtype dt : kAllDtypes) err[dt] = mean_rel_error(dt, d, rows, norm_corrected, rng);
  for (KvDtype dt : kAllDtypes) std::cout << "  " << kv_dtype_name(dt) << " d=128: mean rel sq error " << err[dt] << "\n";
  // TurboQuant's D_mse (paper, Theorem 1 / Table): b = 4: 0.0093, b = 3: 0.034, b = 2: 0.116.
  // Measured (beta codebook, dense rotation, norm-corrected): tq4 0.00913, tq3 0.0338, tq2 0.1186,
  // tq3.5 0.0208, tq2.5 0.0744, q8_0 2.8e-5, q4_0 0.0074, q4_0h 0.0074, f16 4.3e-8.
  EXPECT_NEAR(err[KvDtype::TQ4], 0.0093, 0.15 * 0.0093);
  EXPECT_NEAR(err[KvDtype::TQ3], 0.034, 0.15 * 0.034);
  EXPECT_NEAR(err[KvDtype::TQ2], 0.116, 0.15 * 0.116);
  // Split rows of isotropic data: half at each width.
  EXPECT_NEAR(err[KvDtype::TQ3_5], (0.0093 + 0.034) / 2, 0.15 * (0.0093 + 0.034) / 2);
  EXPECT_NEAR(err[KvDtype::TQ2_5], (0.034 + 0.116) / 2, 0.15 * (0.034 + 0.116) / 2);
  EXPECT_LT(err[KvDtype::TQ4], err[KvDtype::TQ3_5]);
  EXPECT_LT(err[KvDtype::TQ3_5], err[KvDtype::TQ3]);
  EXPECT_LT(err[KvDtype::TQ3], err[KvDtype::TQ2_5]);
  EXPECT_LT(err[KvDtype::TQ2_5], err[KvDtype::TQ2]);
  // Orthant codes, the bytes of tq3h / tq2h: about a fifth lower (norm-corrected here).
  EXPECT_LT(err[KvDtype::TQ3O], 0.88 * err[KvDtype::TQ3H]);
  EXPECT_LT(err[KvDtype::TQ2O], 0.88 * err[KvDtype::TQ2H]);
  EXPECT_LT(err[KvDtype::Q8_0], err[KvDtype::Q4_0]);
  EXPECT_LT(err[KvDtype::Q8_0], 1e-4);
  EXPECT_LT(err[KvDtype::Q4_0], 0.02);
  EXPECT_LT(err[KvDtype::Q4_0H], 0.02);
  EXPECT_LT(err[KvDtype::F16], 1e-6);
  EXPECT_EQ(err[KvDtype::F32], 0.0);
  // The Hadamard rotation gives the same distortion as the dense one.
  KvQuantOptions had;
  had.rotation = RotationKind::hadamard;
  const double tq4_had = mean_rel_error(KvDtype::TQ4, d, rows, had, rng);
  std::cout << "  tq4 d=128 hadamard: " << tq4_had << "\n";
  EXPECT_NEAR(tq4_had, 0.0093, 0.15 * 0.0093);
}

// ---------------------------------------------------------------------------------------------
// Storage space

std::vector<int> random_permutation(int d, std::mt19937& rng) {
  std::vector<int> p(d);
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), rng);
  return p;
}

TEST(KvQuantizedCache, StorageSpaceKeepsDotProducts) {
  std::mt19937 rng(7);
  const int d = 128, heads = 2;
  for (KvDtype dt : kAllDtypes) {
    SCOPED_TRACE(std::string(kv_dtype_name(dt)));
    std::vector<std::vector<int>> order;
    if (kv_dtype_is_split(dt)) order = {random_permutation(d, rng), random_permutation(d, rng)};
    const KvRowCodec codec(dt, d, 1, KvQuantOptions{}, order);
    EXPECT_EQ(codec.transforms(), kv_dtype_is_rotated(dt));
    const CodedRowFormat f = codec.row_format();
    std::vector<uint8_t> row(codec.row_bytes());
    std::vector<float> ys(d), back(d), qs(d), dec(d), dec_s(d), dec_s2(d);
    for (int h = 0; h < heads; ++h) {
      for (int trial = 0; trial < 10; ++trial) {
        const std::vector<float> x = random_vec(d, rng), q = random_vec(d, rng);
        codec.to_storage(x.data(), h, ys.data());
        codec.from_storage(ys.data(), h, back.data());
        for (int j = 0; j < d; ++j) ASSERT_NEAR(back[j], x[j], 1e-5f) << j;
        if (!codec.transforms()) {
          ASSERT_EQ(ys, x);
        }
        EXPECT_NEAR(norm2(ys.data(), d), norm2(x.data(), d), 1e-4 * norm2(x.data(), d));
        // q . decode(row) == to_storage(q) . (the row as stored)
        codec.encode(x.data(), h, row.data());
        codec.decode(row.data(), h, dec.data());
        codec.to_storage(q.data(), h, qs.data());
        decode_coded_row_scalar(f, row.data(), dec_s.data());
        const double scale = std::sqrt(norm2(q.data(), d) * norm2(dec.data(), d));
        EXPECT_NEAR(dot(qs.data(), dec_s.data(), d), dot(q.data(), dec.data(), d), 2e-6 * scale);
        // ... and the stored row is the storage-space image of the decoded one.
        codec.to_storage(dec.data(), h, dec_s2.data());
        for (int j = 0; j < d; ++j) ASSERT_NEAR(dec_s2[j], dec_s[j], 1e-5f * std::sqrt(norm2(x.data(), d))) << j;
      }
    }
    if (kv_dtype_is_split(dt)) {
      // The order puts channel order[0] in the first (more bits) half, order[d-1] in the second.
      for (int h = 0; h < heads; ++h) {
        std::vector<float> e(d, 0.0f);
        e[codec.order(h)[0]] = 1.0f;
        codec.to_storage(e.data(), h, ys.data());
        EXPECT_NEAR(norm2(ys.data(), d / 2), 1.0, 1e-5);
        std::fill(e.begin(), e.end(), 0.0f);
        e[codec.order(h)[d - 1]] = 1.0f;
        codec.to_storage(e.data(), h, ys.data());
        EXPECT_NEAR(norm2(ys.data() + d / 2, d / 2), 1.0, 1e-5);
      }
    }
  }
  // An order that is not a permutation, or an order for a dtype that does not split, fails.
  std::vector<int> dup(d, 0);
  EXPECT_THROW(KvRowCodec(KvDtype::TQ3_5, d, 0, KvQuantOptions{}, {dup}), Error);
  EXPECT_THROW(KvRowCodec(KvDtype::TQ4, d, 0, KvQuantOptions{}, {random_permutation(d, rng)}), Error);
}

// ---------------------------------------------------------------------------------------------
// Protected layers, page views, attention over the cache

TEST(KvQuantizedCache, ProtectedLayersAndAttentionOverPages) {
  const int d = 128, heads = 2, layers = 4, n_tokens = 70;
  KvCacheShape shape{layers, heads, d, 16, KvDtype::TQ4, KvDtype::TQ4};
  shape.protect_layers = 1;
  EXPECT_EQ(shape.describe(), "tq4, first/last 1 layers f16");
  // 2 f16 layers: 2 heads * (256 + 256); 2 tq4 layers: 2 heads * (68 + 68).
  EXPECT_EQ(shape.bytes_per_token(), size_t(2 * 2 * 512 + 2 * 2 * 136));
  EXPECT_EQ(shape.layer_bytes_per_token(1), 272u);
  EXPECT_EQ(shape.bytes_per_block(), 16 * shape.bytes_per_token());
  KvCacheShape mixed{layers, heads, d, 16, KvDtype::TQ4, KvDtype::Q8_0};
  EXPECT_EQ(mixed.describe(), "k=tq4,v=q8_0");
  EXPECT_EQ(mixed.bytes_per_token(), size_t(layers * heads * (68 + 136)));

  std::mt19937 rng(99);
  OutlierPartition parts;
  parts.k_order.assign(layers, {random_permutation(d, rng), random_permutation(d, rng)});
  parts.v_order = parts.k_order;
  for (auto [kd, vd] : {std::pair{KvDtype::TQ4, KvDtype::TQ4}, std::pair{KvDtype::TQ3_5, KvDtype::Q4_0H},
                        std::pair{KvDtype::Q8_0, KvDtype::TQ2_5}}) {
    SCOPED_TRACE(std::string(kv_dtype_name(kd)) + "/" + std::string(kv_dtype_name(vd)));
    shape.k_dtype = kd;
    shape.v_dtype = vd;
    KvCache cache(shape, 6, KvQuantOptions{}, parts);
    EXPECT_EQ(cache.total_bytes(), shape.bytes_per_block() * 6);
    for (int l = 0; l < layers; ++l) {
      const bool fp = l == 0 || l == layers - 1;
      EXPECT_EQ(cache.layer_is_fp(l), fp) << l;
      EXPECT_EQ(shape.k_dtype_of(l), fp ? KvDtype::F16 : kd);
      EXPECT_EQ(cache.k_pages(l).format.codec == RowCodec::F16, fp) << l;
      EXPECT_EQ(cache.k_pages(l).row_stride, kv_row_bytes(shape.k_dtype_of(l), d));
      EXPECT_EQ(cache.v_pages(l).row_stride, kv_row_bytes(shape.v_dtype_of(l), d));
    }

    BlockPool pool(cache);
    BlockTable other, table;
    ASSERT_TRUE(pool.allocate(other, 9));
    ASSERT_TRUE(pool.allocate(table, n_tokens));
    for (int l = 0; l < layers; ++l) {
      std::vector<float> k_read(size_t(n_tokens) * heads * d), v_read(k_read.size());  // [n_ctx, heads, d]
      for (int t = 0; t < n_tokens; ++t) {
        const std::vector<float> k = random_vec(size_t(heads) * d, rng), v = random_vec(size_t(heads) * d, rng);
        cache.write(l, table, t, k.data(), v.data());
        cache.read(l, table, t, k_read.data() + size_t(t) * heads * d, v_read.data() + size_t(t) * heads * d);
        if (l == 0) {  // protected: f16 rounding only
          for (int j = 0; j < heads * d; ++j) ASSERT_EQ(k_read[size_t(t) * heads * d + j], fp16_to_fp32(fp32_to_fp16(k[j])));
        }
      }
      // Coded attention over the pages, q mapped into K's storage space, the output back from V's,
      // equals attention over the rows read back.
      const int n_q = 3 * heads;
      const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 2.0f);
      std::vector<float> q_s(q.size()), out_s(q.size()), out(q.size()), ref(q.size());
      for (int h = 0; h < n_q; ++h) cache.k_codec(l).to_storage(q.data() + h * d, h / 3, q_s.data() + h * d);
      const PagedAttentionArgs a{.q = q_s.data(), .n_q_heads = n_q, .n_kv_heads = heads, .head_dim = d,
                                 .block_table = table.blocks.data(), .block_size = 16, .n_ctx = n_tokens,
                                 .k = cache.k_pages(l), .v = cache.v_pages(l),
                                 .scale = 1.0f / std::sqrt(float(d)), .out = out_s.data()};
      paged_attention_fast(a);
      for (int h = 0; h < n_q; ++h) cache.v_codec(l).from_storage(out_s.data() + h * d, h / 3, out.data() + h * d);
      attention_reference(q.data(), k_read.data(), v_read.data(), n_q, heads, d, n_tokens, a.scale, ref.data());
      for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5f) << "layer " << l << " i " << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// outlier_order

bool is_permutation_of_iota(std::vector<int> p) {
  std::sort(p.begin(), p.end());
  return std::adjacent_find(p.begin(), p.end(), [](int a, int b) { return b != a + 1; }) == p.end() && p[0] == 0;
}

TEST(OutlierOrder, ByHand) {
  // Channels one by one: the 4 largest of 8 first, both halves ascending.
  EXPECT_EQ(outlier_order({1, 9, 3, 7, 2, 8, 0, 5}, false, RopePairing::Half),
            (std::vector<int>{1, 3, 5, 7, 0, 2, 4, 6}));
  const std::vector<double> e = {4, 4, 0, 0, 4, 4, 0, 9};
  // Single channels: 7, then the ties 0, 1, 4 (lower index first).
  EXPECT_EQ(outlier_order(e, false, RopePairing::Half), (std::vector<int>{0, 1, 4, 7, 2, 3, 5, 6}));
  // Half pairs (i, i+4): energies 8, 8, 0, 9 -> pairs 3 and 0 -> channels 3, 7, 0, 4.
  EXPECT_EQ(outlier_order(e, true, RopePairing::Half), (std::vector<int>{0, 3, 4, 7, 1, 2, 5, 6}));
  // Adjacent pairs (2i, 2i+1): energies 8, 0, 8, 9 -> pairs 3 and 0 -> channels 6, 7, 0, 1.
  EXPECT_EQ(outlier_order(e, true, RopePairing::Adjacent), (std::vector<int>{0, 1, 6, 7, 2, 3, 4, 5}));
  // d = 6 (3 pairs, an odd number): the top pair (2, 5), then the stronger member of the next, 1.
  EXPECT_EQ(outlier_order({1, 5, 0, 1, 0, 7}, true, RopePairing::Half), (std::vector<int>{1, 2, 5, 0, 3, 4}));
}

TEST(OutlierOrder, RandomEnergiesKeepPairsTogether) {
  std::mt19937 rng(5);
  std::exponential_distribution<double> ex(1.0);
  for (int d : {64, 128, 96}) {
    for (RopePairing pairing : {RopePairing::Half, RopePairing::Adjacent}) {
      std::vector<double> e(d);
      for (double& v : e) v = ex(rng);
      const std::vector<int> order = outlier_order(e, true, pairing);
      ASSERT_EQ(int(order.size()), d);
      ASSERT_TRUE(is_permutation_of_iota(order));
      ASSERT_TRUE(std::is_sorted(order.begin(), order.begin() + d / 2));
      ASSERT_TRUE(std::is_sorted(order.begin() + d / 2, order.end()));
      std::vector<char> outlier(d, 0);
      for (int i = 0; i < d / 2; ++i) outlier[order[i]] = 1;
      double min_in = 1e300, max_out = -1;
      for (int p = 0; p < d / 2; ++p) {
        const int a = pairing == RopePairing::Half ? p : 2 * p, b = pairing == RopePairing::Half ? p + d / 2 : 2 * p + 1;
        EXPECT_EQ(outlier[a], outlier[b]) << "pair " << p << " split, d=" << d;
        double& bound = outlier[a] ? min_in : max_out;
        bound = outlier[a] ? std::min(bound, e[a] + e[b]) : std::max(bound, e[a] + e[b]);
      }
      EXPECT_GE(min_in, max_out) << "d=" << d;
      const std::vector<int> single = outlier_order(e, false, pairing);
      ASSERT_TRUE(is_permutation_of_iota(single));
      for (int i = 0; i < d / 2; ++i)
        for (int j = d / 2; j < d; ++j) ASSERT_GE(e[single[i]], e[single[j]]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// What the outlier order buys: keys like Qwen2/3's (a large per-channel bias, a few RoPE pairs
// carrying most of the energy, the same ones at every position) stored as tq3.5 / tq2.5.

// A "model" of keys: per-channel bias and spread of every KV head.
struct KeyModel {
  int heads = 0, d = 0;
  std::vector<float> bias, sigma;  // [heads * d]
};

KeyModel qwen_like_key_model(int heads, int d, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  KeyModel m{heads, d, std::vector<float>(size_t(heads) * d), std::vector<float>(size_t(heads) * d, 0.3f)};
  for (float& b : m.bias) b = 0.3f * normal(rng);
  for (int h = 0; h < heads; ++h) {
    std::vector<int> pairs(d / 2);
    std::iota(pairs.begin(), pairs.end(), 0);
    std::shuffle(pairs.begin(), pairs.end(), rng);
    for (int i = 0; i < 6; ++i) {  // 6 outlier pairs of 64: large bias, larger spread
      for (int c : {pairs[i], pairs[i] + d / 2}) {
        m.bias[h * d + c] = (i % 2 ? -1.0f : 1.0f) * (6.0f + 2.0f * i);
        m.sigma[h * d + c] = 1.5f;
      }
    }
  }
  return m;
}

// [n_tokens][heads * d]: bias + noise, then RoPE (Half pairing) at positions first_pos, ...
std::vector<std::vector<float>> sample_keys(const KeyModel& m, int n_tokens, int first_pos, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::vector<float> inv_freq = rope_base_inv_freq(m.d, 1e6);
  std::vector<std::vector<float>> keys(n_tokens, std::vector<float>(m.bias.size()));
  for (int t = 0; t < n_tokens; ++t) {
    for (size_t j = 0; j < keys[t].size(); ++j) keys[t][j] = m.bias[j] + m.sigma[j] * normal(rng);
    apply_rope(keys[t].data(), m.heads, m.d, first_pos + t, inv_freq.data(), RopePairing::Half);
  }
  return keys;
}

double cache_key_error(KvDtype dtype, const OutlierPartition& parts, const std::vector<std::vector<float>>& keys,
                       int heads, int d) {
  const int n = int(keys.size());
  KvCache cache(KvCacheShape{1, heads, d, 16, dtype, dtype}, (n + 15) / 16, KvQuantOptions{}, parts);
  BlockPool pool(cache);
  BlockTable table;
  EXPECT_TRUE(pool.allocate(table, n));
  std::vector<float> k(size_t(heads) * d), v(k.size());
  double sum = 0;
  for (int t = 0; t < n; ++t) {
    cache.write(0, table, t, keys[t].data(), keys[t].data());
    cache.read(0, table, t, k.data(), v.data());
    for (int h = 0; h < heads; ++h) sum += rel_sq_error(keys[t].data() + h * d, k.data() + h * d, d);
  }
  return sum / (n * heads);
}

TEST(KvQuantizedCache, OutlierOrderLowersSplitError) {
  const int heads = 2, d = 128;
  std::mt19937 rng(3);
  const KeyModel model = qwen_like_key_model(heads, d, rng);
  const std::vector<std::vector<float>> calib = sample_keys(model, 256, 0, rng);
  OutlierPartition right, wrong;
  right.k_order.resize(1);
  wrong.k_order.resize(1);
  double outlier_share = 0;
  for (int h = 0; h < heads; ++h) {
    std::vector<double> energy(d);
    for (const auto& k : calib)
      for (int j = 0; j < d; ++j) energy[j] += double(k[h * d + j]) * k[h * d + j];
    std::vector<int> order = outlier_order(energy, true, RopePairing::Half);
    double in = 0, all = 0;
    for (int i = 0; i < d; ++i) (i < d / 2 ? in : all) += energy[order[i]];
    outlier_share += in / (in + all) / heads;
    right.k_order[0].push_back(order);
    std::rotate(order.begin(), order.begin() + d / 2, order.end());  // the quiet half first
    wrong.k_order[0].push_back(order);
  }
  // Fresh tokens of the same model at other positions, measured through the cache.
  const std::vector<std::vector<float>> keys = sample_keys(model, 200, 1000, rng);
  const double e35_right = cache_key_error(KvDtype::TQ3_5, right, keys, heads, d);
  const double e35_wrong = cache_key_error(KvDtype::TQ3_5, wrong, keys, heads, d);
  const double e25_right = cache_key_error(KvDtype::TQ2_5, right, keys, heads, d);
  const double e25_wrong = cache_key_error(KvDtype::TQ2_5, wrong, keys, heads, d);
  const double e3 = cache_key_error(KvDtype::TQ3, {}, keys, heads, d);
  const double e4 = cache_key_error(KvDtype::TQ4, {}, keys, heads, d);
  // Measured: the outlier half holds 99.5 % of the energy; tq3.5 0.0084 (outliers first) vs
  // 0.0318 (quiet half first), tq2.5 0.0323 vs 0.1128; plain tq3 0.0331, tq4 0.0089.
  std::cout << "  outlier half holds " << outlier_share << " of the key energy\n"
            << "  tq3.5: " << e35_right << " (outliers first) vs " << e35_wrong << " (quiet half first)\n"
            << "  tq2.5: " << e25_right << " (outliers first) vs " << e25_wrong << " (quiet half first)\n"
            << "  tq3: " << e3 << ", tq4: " << e4 << "\n";
  EXPECT_GT(outlier_share, 0.8);
  EXPECT_LT(e35_right, 0.05);
  EXPECT_LT(e35_right, 0.6 * e35_wrong);
  EXPECT_LT(e25_right, 0.6 * e25_wrong);
  EXPECT_LT(e35_right, e3);  // the right order beats plain 3 bits at 3.75 bits per element
}

}  // namespace
}  // namespace tq

namespace tq {
namespace {

// The least-squares scale (the default) lowers every TurboQuant mode's row error below the
// norm-corrected scale's (tools/tq_scale_experiment.py: about 8 % at 4 bits, d = 64).
TEST(KvQuantizedCache, LeastSquaresScaleLowersRowError) {
  for (KvDtype dt : {KvDtype::TQ4, KvDtype::TQ3, KvDtype::TQ2, KvDtype::TQ3_5}) {
    KvQuantOptions nc, ls;
    nc.scale_mode = TqScaleMode::norm_corrected;
    ls.scale_mode = TqScaleMode::least_squares;
    EXPECT_EQ(KvQuantOptions{}.scale_mode, TqScaleMode::least_squares);
    std::mt19937 rng_a(7), rng_b(7);  // the same rows for both
    const double e_nc = mean_rel_error(dt, 64, 2000, nc, rng_a), e_ls = mean_rel_error(dt, 64, 2000, ls, rng_b);
    EXPECT_LT(e_ls, 0.97 * e_nc) << kv_dtype_name(dt) << ": least squares " << e_ls << ", norm-corrected " << e_nc;
  }
}

TEST(KvCache, BytesPerTokenFollowTheDtype) {
  // SmolLM2-135M: 30 layers, 3 KV heads, head_dim 64.
  EXPECT_EQ((KvCacheShape{30, 3, 64, 16, KvDtype::F16, KvDtype::F16}.bytes_per_token()), 2u * 30 * 3 * 64 * 2);
  EXPECT_EQ((KvCacheShape{30, 3, 64, 16, KvDtype::F32, KvDtype::F32}.bytes_per_token()), 2u * 30 * 3 * 64 * 4);
}

}  // namespace
}  // namespace tq
