// Channel bits (quant/channel_bits.h): the unit-variance Lloyd-Max codebooks against Max's
// published table, the part packing, the bit allocation, the row codec's exactness of the
// attention maps, its error against tq<b>h on anisotropic rows, and the AVX2 row decoder against
// the scalar one bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "errors/error.h"
#include "kernels/coded_row.h"
#include "kernels/tq_packing.h"
#include "kv/kv_row_codec.h"
#include "quant/channel_bits.h"

namespace tq {
namespace {

constexpr int kD = 64;

TEST(ChannelBits, StandardGaussianCodebooksMatchMaxsTable) {
  // J. Max, "Quantizing for minimum distortion", IRE Trans. Inf. Theory 6 (1960), Table I:
  // mean squared error of the optimum N(0,1) quantizer with 2, 4, 8, 16 and 32 levels. 64 levels
  // lie below the Panter-Dite high-resolution value sqrt(3) pi / 2 * 4^-b (which the optimum
  // approaches from below: 6 % under it at 32 levels).
  const double max_table[] = {0.3634, 0.1175, 0.03454, 0.009497, 0.002499};
  for (int b = 1; b <= kMaxChannelBits; ++b) {
    const Codebook cb = make_standard_gaussian_codebook(b);
    ASSERT_EQ(cb.levels(), 1 << b);
    if (b <= 5) {
      EXPECT_NEAR(cb.mse_per_coord, max_table[b - 1], 5e-3 * max_table[b - 1]) << b << " bits";
    } else {
      const double panter_dite = std::sqrt(3.0) * M_PI / 2 * std::pow(4.0, -b);
      EXPECT_LT(cb.mse_per_coord, panter_dite);
      EXPECT_GT(cb.mse_per_coord, 0.95 * panter_dite);
    }
    for (int i = 0; i < cb.levels(); ++i) EXPECT_EQ(cb.centroids[i], -cb.centroids[cb.levels() - 1 - i]);
  }
  EXPECT_THROW(make_standard_gaussian_codebook(0), Error);
  EXPECT_THROW(make_standard_gaussian_codebook(7), Error);
}

TEST(ChannelBits, PartPackingRoundTrips) {
  std::mt19937 rng(7);
  for (int bits = 0; bits <= 6; ++bits)
    for (int dim : {8, 16, 24, 40, 64, 128}) {
      std::vector<uint8_t> idx(dim), back(dim, 0xff), packed(channel_part_bytes(dim, bits) + 1, 0xab);
      for (auto& i : idx) i = bits ? static_cast<uint8_t>(rng() & ((1u << bits) - 1)) : 0;
      pack_channel_part(idx.data(), dim, bits, packed.data());
      EXPECT_EQ(packed.back(), 0xab) << "wrote past the part";
      unpack_channel_part(packed.data(), dim, bits, back.data());
      EXPECT_EQ(idx, back) << bits << " bits, " << dim;
    }
  EXPECT_THROW(channel_part_bytes(12, 3), Error);
  EXPECT_THROW(channel_part_bytes(16, 7), Error);
}

// Rows with a few dominant axes in a random basis; queries reading some axes more than others.
struct Anisotropic {
  std::vector<double> basis;  // [d][d] orthonormal rows
  std::vector<double> sd;     // per axis
  std::vector<float> sample(std::mt19937_64& rng) const {
    std::normal_distribution<double> n;
    std::vector<float> x(kD, 0.0f);
    for (int i = 0; i < kD; ++i) {
      const double c = sd[i] * n(rng);
      for (int j = 0; j < kD; ++j) x[j] += static_cast<float>(c * basis[size_t(i) * kD + j]);
    }
    return x;
  }
};

Anisotropic anisotropic(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n;
  Anisotropic a;
  a.basis.resize(size_t(kD) * kD);
  for (double& v : a.basis) v = n(rng);
  for (int i = 0; i < kD; ++i) {  // Gram-Schmidt
    double* r = &a.basis[size_t(i) * kD];
    for (int k = 0; k < i; ++k) {
      const double* p = &a.basis[size_t(k) * kD];
      double dot = 0;
      for (int j = 0; j < kD; ++j) dot += r[j] * p[j];
      for (int j = 0; j < kD; ++j) r[j] -= dot * p[j];
    }
    double norm = 0;
    for (int j = 0; j < kD; ++j) norm += r[j] * r[j];
    for (int j = 0; j < kD; ++j) r[j] /= std::sqrt(norm);
  }
  for (int i = 0; i < kD; ++i) a.sd.push_back(std::pow(0.9, i) * 3.0);  // 0.9^64 ~ 1e-3 of the first
  return a;
}

// Spectrum of one head from sample rows (what the calibration pass does).
ChannelSpectrum spectrum_of(const std::vector<std::vector<float>>& rows, const std::vector<double>& query) {
  std::vector<double> cov(size_t(kD) * kD);
  for (const auto& r : rows)
    for (int i = 0; i < kD; ++i)
      for (int j = 0; j < kD; ++j) cov[size_t(i) * kD + j] += double(r[i]) * r[j] / rows.size();
  return channel_spectrum(cov, query, kD);
}

TEST(ChannelBits, SpectrumFindsTheAxesInImportanceOrder) {
  const Anisotropic a = anisotropic(1);
  std::mt19937_64 rng(2);
  std::vector<std::vector<float>> rows;
  for (int t = 0; t < 4000; ++t) rows.push_back(a.sample(rng));
  const ChannelSpectrum s = spectrum_of(rows, {});
  ASSERT_EQ(s.dim, kD);
  for (int i = 0; i + 1 < kD; ++i) EXPECT_GE(s.importance[i], s.importance[i + 1]);
  // The leading axes are the generating ones (well separated at the top), up to sign.
  for (int i = 0; i < 4; ++i) {
    double dot = 0;
    for (int j = 0; j < kD; ++j) dot += s.basis[size_t(i) * kD + j] * a.basis[size_t(i) * kD + j];
    EXPECT_GT(std::abs(dot), 0.98) << "axis " << i;
    EXPECT_NEAR(s.variance[i], a.sd[i] * a.sd[i], 0.1 * a.sd[i] * a.sd[i]);
  }
  // A query moment that reads only generating axis 10 moves it to the front.
  std::vector<double> q(size_t(kD) * kD);
  for (int r = 0; r < kD; ++r)
    for (int c = 0; c < kD; ++c) q[size_t(r) * kD + c] = 100.0 * a.basis[10 * kD + r] * a.basis[10 * kD + c];
  const ChannelSpectrum w = spectrum_of(rows, q);
  double dot = 0;
  for (int j = 0; j < kD; ++j) dot += w.basis[j] * a.basis[10 * kD + j];
  EXPECT_GT(std::abs(dot), 0.9);
}

TEST(ChannelBits, AllocationIsReverseWaterFilling) {
  ChannelSpectrum s;
  s.dim = 32;
  // Four groups whose importance falls 16x per group: about 2 bits apart each.
  for (int i = 0; i < 32; ++i) s.importance.push_back(std::pow(16.0, -(i / 8)));
  for (int avg = 1; avg <= kMaxChannelBits; ++avg) {
    const ChannelLayout l = allocate_channel_bits({s, s}, avg);
    EXPECT_EQ(l.dim(), 32);
    EXPECT_EQ(l.total_bits(), avg * 32);
    for (size_t p = 0; p + 1 < l.part_bits.size(); ++p) EXPECT_GT(l.part_bits[p], l.part_bits[p + 1]);
    for (int b : l.part_bits) EXPECT_LE(b, kMaxChannelBits);
  }
  // Groups 16x apart in importance: the first gets far more than the average, every axis keeps
  // at least one bit.
  const ChannelLayout three = allocate_channel_bits({s}, 3);
  EXPECT_GE(three.part_bits.front(), 5);
  EXPECT_EQ(three.part_bits.back(), 1);
  // Equal importance everywhere: every axis at the average.
  ChannelSpectrum flat = s;
  flat.importance.assign(32, 1.0);
  EXPECT_EQ(allocate_channel_bits({flat}, 3).part_bits, std::vector<int>{3});
  ChannelSpectrum odd = s;
  odd.dim = 30;
  odd.importance.resize(30);
  EXPECT_THROW(allocate_channel_bits({odd}, 3), Error);
}

struct CodecFixture {
  Anisotropic a = anisotropic(3);
  std::vector<std::vector<float>> calib, test;
  std::vector<double> query;
  CodecFixture() {
    std::mt19937_64 rng(4);
    for (int t = 0; t < 3000; ++t) calib.push_back(a.sample(rng));
    for (int t = 0; t < 300; ++t) test.push_back(a.sample(rng));
    query.assign(size_t(kD) * kD, 0.0);
    for (int j = 0; j < kD; ++j) query[size_t(j) * kD + j] = 1.0;
  }
  KvRowCodec codec(KvDtype dtype) const {
    if (!kv_dtype_is_channel_bits(dtype)) return KvRowCodec(dtype, kD, 0, KvQuantOptions{});
    const ChannelSpectrum s = spectrum_of(calib, query);
    return KvRowCodec(dtype, kD, 0, KvQuantOptions{}, {}, {}, {}, channel_coding({s}, kv_dtype_tq_bits(dtype).first));
  }
  double relative_error(const KvRowCodec& c) const {
    std::vector<uint8_t> row(c.row_bytes());
    std::vector<float> back(kD);
    double err = 0, ref = 0;
    for (const auto& x : test) {
      c.encode(x.data(), 0, row.data());
      c.decode(row.data(), 0, back.data());
      for (int j = 0; j < kD; ++j) err += double(x[j] - back[j]) * (x[j] - back[j]), ref += double(x[j]) * x[j];
    }
    return err / ref;
  }
};

TEST(ChannelBits, CodecMapsKeepScoresAndRowsAreTheBytesOfTqH) {
  const CodecFixture f;
  const KvRowCodec c = f.codec(KvDtype::TQ3C);
  EXPECT_EQ(c.row_bytes(), kv_row_bytes(KvDtype::TQ3H, kD));
  EXPECT_EQ(coded_row_bytes(c.row_format()), c.row_bytes());
  std::mt19937_64 rng(5);
  std::normal_distribution<float> n;
  std::vector<float> q(kD), qs(kD), ks(kD), back(kD);
  for (float& v : q) v = n(rng);
  const std::vector<float>& k = f.test[0];
  c.query_to_storage(q.data(), 0, qs.data());
  c.to_storage(k.data(), 0, ks.data());
  double exact = 0, mapped = 0;
  for (int j = 0; j < kD; ++j) exact += double(q[j]) * k[j], mapped += double(qs[j]) * ks[j];
  EXPECT_NEAR(mapped, exact, 1e-4 * (1 + std::abs(exact)));
  c.from_storage(ks.data(), 0, back.data());
  for (int j = 0; j < kD; ++j) EXPECT_NEAR(back[j], k[j], 1e-4f * (1 + std::abs(k[j])));
}

TEST(ChannelBits, BeatsTheRotatedRowOnAnisotropicRows) {
  const CodecFixture f;
  for (auto [channel, rotated] : {std::pair{KvDtype::TQ2C, KvDtype::TQ2H}, {KvDtype::TQ3C, KvDtype::TQ3H}, {KvDtype::TQ4C, KvDtype::TQ4H}}) {
    const double ec = f.relative_error(f.codec(channel)), er = f.relative_error(f.codec(rotated));
    EXPECT_LT(ec, 0.5 * er) << kv_dtype_name(channel) << " " << ec << " vs " << er;
  }
}

TEST(ChannelBits, ZeroRowsAndMissingAxesFailClearly) {
  const CodecFixture f;
  const KvRowCodec c = f.codec(KvDtype::TQ3C);
  std::vector<float> zero(kD, 0.0f), back(kD, 1.0f);
  std::vector<uint8_t> row(c.row_bytes());
  c.encode(zero.data(), 0, row.data());
  c.decode(row.data(), 0, back.data());
  for (float v : back) EXPECT_EQ(v, 0.0f);
  EXPECT_THROW(KvRowCodec(KvDtype::TQ3C, kD, 0, KvQuantOptions{}), Error);
  EXPECT_THROW(c.to_storage(zero.data(), 1, back.data()), Error);  // only head 0 was calibrated
}

TEST(ChannelBits, Avx2DecoderMatchesScalarBitForBit) {
  const CodecFixture f;
  for (KvDtype dtype : {KvDtype::TQ2C, KvDtype::TQ3C, KvDtype::TQ4C}) {
    const KvRowCodec c = f.codec(dtype);
    const CodedRowFormat fmt = c.row_format();
    check_coded_row_format(fmt);
    if (!coded_row_avx2_available(fmt)) GTEST_SKIP() << "no AVX2";
    std::vector<uint8_t> rows(c.row_bytes() * f.test.size());
    for (size_t t = 0; t < f.test.size(); ++t) c.encode(f.test[t].data(), 0, rows.data() + t * c.row_bytes());
    std::vector<float> scalar(kD), simd(kD * f.test.size());
    decode_coded_rows_avx2(fmt, rows.data(), c.row_bytes(), static_cast<int>(f.test.size()), simd.data(), kD);
    for (size_t t = 0; t < f.test.size(); ++t) {
      decode_coded_row_scalar(fmt, rows.data() + t * c.row_bytes(), scalar.data());
      ASSERT_EQ(std::memcmp(scalar.data(), simd.data() + t * kD, sizeof(float) * kD), 0) << kv_dtype_name(dtype) << " row " << t;
    }
  }
}

}  // namespace
}  // namespace tq
