#include "quant/channel_bits.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "errors/error.h"
#include "kernels/tq_packing.h"
#include "quant/tq_row.h"

// LAPACK (OpenBLAS carries it): eigenvalues and eigenvectors of a real symmetric matrix.
extern "C" void dsyev_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w,
                       double* work, const int* lwork, int* info);

namespace tq {

namespace {
constexpr int kMaxDim = 512;

// Distortion of the standard normal's b-bit Lloyd-Max quantizer, b = 0..kMaxChannelBits.
const std::vector<double>& gaussian_distortion() {
  static const std::vector<double> d = [] {
    std::vector<double> out{1.0};
    for (int b = 1; b <= kMaxChannelBits; ++b) out.push_back(make_standard_gaussian_codebook(b).mse_per_coord);
    return out;
  }();
  return d;
}
}  // namespace

ChannelSpectrum channel_spectrum(const std::vector<double>& cov, const std::vector<double>& query, int dim) {
  const size_t n2 = size_t(dim) * dim;
  if (dim <= 0 || dim > kMaxDim) fail("channel spectrum: dim {} must be in 1..{}", dim, kMaxDim);
  if (cov.size() != n2 || (!query.empty() && query.size() != n2))
    fail("channel spectrum: covariance has {} values and query moment {}, need {}", cov.size(), query.size(), n2);
  for (double v : cov)
    if (!std::isfinite(v)) fail("channel spectrum: the calibration rows' covariance is not finite");
  std::vector<double> a(cov);  // symmetric, so row- and column-major agree
  std::vector<double> lambda(dim);
  int info = 0, lwork = -1;
  double query_work = 0;
  const char jobz = 'V', uplo = 'U';
  dsyev_(&jobz, &uplo, &dim, a.data(), &dim, lambda.data(), &query_work, &lwork, &info);
  lwork = std::max(1, static_cast<int>(query_work));
  std::vector<double> work(lwork);
  dsyev_(&jobz, &uplo, &dim, a.data(), &dim, lambda.data(), work.data(), &lwork, &info);
  if (info != 0) fail("channel spectrum: LAPACK dsyev failed (info {})", info);
  // Column i of the column-major result (a + i*dim) is the eigenvector of lambda[i].
  std::vector<double> importance(dim);
  for (int i = 0; i < dim; ++i) {
    double* v = a.data() + size_t(i) * dim;
    int big = 0;
    for (int j = 1; j < dim; ++j)
      if (std::abs(v[j]) > std::abs(v[big])) big = j;
    if (v[big] < 0)
      for (int j = 0; j < dim; ++j) v[j] = -v[j];
    lambda[i] = std::max(0.0, lambda[i]);
    double w = 1.0;
    if (!query.empty()) {
      w = 0;
      for (int r = 0; r < dim; ++r) {
        double row = 0;
        for (int c = 0; c < dim; ++c) row += query[size_t(r) * dim + c] * v[c];
        w += v[r] * row;
      }
      w = std::max(0.0, w);
    }
    importance[i] = lambda[i] * w;
  }
  std::vector<int> order(dim);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return importance[x] > importance[y]; });
  ChannelSpectrum s;
  s.dim = dim;
  s.basis.resize(n2);
  for (int i = 0; i < dim; ++i) {
    std::copy_n(a.data() + size_t(order[i]) * dim, dim, s.basis.data() + size_t(i) * dim);
    s.variance.push_back(lambda[order[i]]);
    s.importance.push_back(importance[order[i]]);
  }
  return s;
}

int ChannelLayout::dim() const { return std::accumulate(part_dims.begin(), part_dims.end(), 0); }

int ChannelLayout::total_bits() const {
  int t = 0;
  for (size_t i = 0; i < part_dims.size(); ++i) t += part_dims[i] * part_bits[i];
  return t;
}

ChannelLayout allocate_channel_bits(const std::vector<ChannelSpectrum>& heads, int avg_bits) {
  if (heads.empty()) fail("channel bits: no KV heads to allocate for");
  const int dim = heads[0].dim;
  if (dim <= 0 || dim % kChannelGroup != 0) fail("channel bits need head_dim to be a multiple of {}, got {}", kChannelGroup, dim);
  if (avg_bits < 1 || avg_bits > kMaxChannelBits) fail("channel bits: average {} must be in 1..{}", avg_bits, kMaxChannelBits);
  const int groups = dim / kChannelGroup;
  std::vector<double> weight(groups, 0.0);
  for (const ChannelSpectrum& h : heads) {
    if (h.dim != dim || static_cast<int>(h.importance.size()) != dim) fail("channel bits: KV heads of one layer differ in size");
    for (int i = 0; i < dim; ++i) weight[i / kChannelGroup] += h.importance[i];
  }
  const std::vector<double>& D = gaussian_distortion();
  // Every axis keeps at least one bit: an axis the calibration text barely moved along can carry
  // energy in other text, and a dropped axis loses all of it (0-bit floors measured worse).
  std::vector<int> bits(groups, 1);
  for (int step = groups; step < avg_bits * groups; ++step) {
    int best = -1;
    double best_gain = -1;
    for (int g = 0; g < groups; ++g) {
      if (bits[g] >= kMaxChannelBits) continue;
      const double gain = weight[g] * (D[bits[g]] - D[bits[g] + 1]);
      if (gain > best_gain) best_gain = gain, best = g;  // ties: the earlier (more important) group
    }
    ++bits[best];
  }
  // The weights fall along the basis order, so the bits do; keep them sorted regardless so parts
  // are runs of descending width.
  std::stable_sort(bits.begin(), bits.end(), std::greater<int>());
  ChannelLayout layout;
  for (int g = 0; g < groups; ++g) {
    if (!layout.part_bits.empty() && layout.part_bits.back() == bits[g]) {
      layout.part_dims.back() += kChannelGroup;
    } else {
      layout.part_bits.push_back(bits[g]);
      layout.part_dims.push_back(kChannelGroup);
    }
  }
  return layout;
}

ChannelCoding channel_coding(const std::vector<ChannelSpectrum>& heads, int avg_bits) {
  ChannelCoding c;
  c.layout = allocate_channel_bits(heads, avg_bits);
  for (const ChannelSpectrum& h : heads) {
    c.basis.emplace_back(h.basis.begin(), h.basis.end());
    // Axes the calibration text never moved along get a floor, so that dividing by sigma stays
    // bounded when other text does move along them.
    const double mean = std::accumulate(h.variance.begin(), h.variance.end(), 0.0) / h.dim;
    const double floor = std::max(1e-2 * mean, 1e-30);
    std::vector<float> sigma(h.dim);
    for (int i = 0; i < h.dim; ++i) sigma[i] = static_cast<float>(std::sqrt(std::max(h.variance[i], floor)));
    c.sigma.push_back(std::move(sigma));
  }
  return c;
}

size_t channel_row_bytes(const ChannelLayout& layout) {
  size_t bytes = 0;
  for (size_t i = 0; i < layout.part_dims.size(); ++i) bytes += channel_part_bytes(layout.part_dims[i], layout.part_bits[i]);
  return bytes + sizeof(uint16_t);
}

void encode_channel_row(const float* y, const ChannelLayout& layout, const std::vector<Codebook>& codebooks,
                        const float* sigma, uint8_t* row) {
  const int dim = layout.dim();
  if (dim <= 0 || dim > kMaxDim) fail("channel-bit row: dim {} must be in 1..{}", dim, kMaxDim);
  for (int b : layout.part_bits)
    if (b > 0 && (b >= static_cast<int>(codebooks.size()) || codebooks[b].bits != b))
      fail("channel-bit row: no {}-bit codebook given", b);
  uint8_t idx[kMaxDim];
  // The parts' codebooks per coordinate (null: not stored).
  const Codebook* cb[kMaxDim];
  for (size_t p = 0, at = 0; p < layout.part_dims.size(); at += layout.part_dims[p], ++p)
    for (int j = 0; j < layout.part_dims[p]; ++j) cb[at + j] = layout.part_bits[p] > 0 ? &codebooks[layout.part_bits[p]] : nullptr;
  double stored_energy = 0.0;
  int stored = 0;
  for (int j = 0; j < dim; ++j)
    if (cb[j]) stored_energy += double(y[j]) * y[j], ++stored;
  double w[kMaxDim];
  for (int j = 0; j < dim; ++j) w[j] = double(sigma[j]) * sigma[j];
  auto choose = [&](double inv_scale) {
    for (int j = 0; j < dim; ++j) idx[j] = cb[j] ? static_cast<uint8_t>(cb[j]->index_of(static_cast<float>(y[j] * inv_scale))) : 0;
  };
  auto fit = [&](double* yc, double* cc) {
    *yc = *cc = 0;
    for (int j = 0; j < dim; ++j)
      if (cb[j]) {
        const double c = cb[j]->centroids[idx[j]];
        *yc += w[j] * y[j] * c, *cc += w[j] * c * c;
      }
  };
  double scale = stored > 0 ? std::sqrt(stored_energy / stored) : 0.0;  // the stored axes' rms
  if (scale > 0.0 && std::isfinite(scale)) {
    choose(1.0 / scale);
    for (int round = 0; round < 3; ++round) {
      double yc, cc;
      fit(&yc, &cc);
      if (!(yc > 0.0)) break;
      scale = yc / cc;
      choose(1.0 / scale);
    }
    double yc, cc;
    fit(&yc, &cc);
    if (yc > 0.0) scale = yc / cc;
  } else {
    choose(0.0);
    if (!std::isfinite(stored_energy)) scale = std::nan("");
  }
  size_t at_byte = 0;
  for (size_t p = 0, at = 0; p < layout.part_dims.size(); at += layout.part_dims[p], ++p) {
    pack_channel_part(idx + at, layout.part_dims[p], layout.part_bits[p], row + at_byte);
    at_byte += channel_part_bytes(layout.part_dims[p], layout.part_bits[p]);
  }
  const uint16_t h = tq_scale_to_fp16(static_cast<float>(scale));
  std::memcpy(row + at_byte, &h, sizeof h);
}

}  // namespace tq
