// The tq3o / tq2o orthant codebooks and the row encoder. Compiled without contraction
// (CMakeLists.txt): a distance is a sum of rounded squares in a fixed order in every build, so the
// nearest pattern does not depend on the compiler's choice of fused multiply-adds.
#include "quant/orthant_codebook.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "errors/error.h"
#include "quant/coded_row_scale.h"

namespace tq {
namespace {

#include "quant/orthant_codebook_patterns.inc"

constexpr int kMaxDim = 512;

OrthantCodebook build(int dim, int bits) {
  OrthantCodebook cb;
  cb.dim = dim;
  cb.bits = bits;
  cb.group = orthant_group(bits);
  const float* standard = orthant_codebook_standard_patterns(bits);
  const double unit = 1.0 / std::sqrt(double(dim));
  const size_t n = size_t(kOrthantPatterns) * cb.group;
  cb.patterns.resize(n);
  cb.by_coordinate.resize(n);
  for (int p = 0; p < kOrthantPatterns; ++p)
    for (int k = 0; k < cb.group; ++k) {
      const float v = static_cast<float>(standard[p * cb.group + k] * unit);
      cb.patterns[size_t(p) * cb.group + k] = v;
      cb.by_coordinate[size_t(k) * kOrthantPatterns + p] = v;
    }
  return cb;
}

}  // namespace

int orthant_group(int bits) {
  if (bits != 2 && bits != 3) fail("orthant codes have 2 or 3 bits per coordinate, not {}", bits);
  return 8 / (bits - 1);
}

const float* orthant_codebook_standard_patterns(int bits) {
  return orthant_group(bits) == 4 ? kOrthantPatterns3 : kOrthantPatterns2;
}

void check_tq_orthant_row_shape(int dim, int bits) {
  const int group = orthant_group(bits);
  if (dim < 8 || dim > kMaxDim || dim % 8 != 0)
    fail("tq{}o rows code groups of {} coordinates and one sign bit each and need head_dim a multiple of 8 in 8..512, got {}",
         bits, group, dim);
}

size_t tq_orthant_row_bytes(int dim, int bits) {
  check_tq_orthant_row_shape(dim, bits);
  return size_t(dim) / orthant_group(bits) + size_t(dim) / 8 + sizeof(uint16_t);
}

const OrthantCodebook& orthant_codebook(int dim, int bits) {
  check_tq_orthant_row_shape(dim, bits);
  static std::mutex mutex;
  static std::map<std::pair<int, int>, std::unique_ptr<OrthantCodebook>> built;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<OrthantCodebook>& cb = built[{dim, bits}];
  if (!cb) cb = std::make_unique<OrthantCodebook>(build(dim, bits));
  return *cb;
}

int OrthantCodebook::nearest(const float* magnitudes) const {
  // All 256 distances, coordinate by coordinate (a loop the compiler vectorizes over patterns),
  // then the first smallest.
  float dist[kOrthantPatterns];
  for (int p = 0; p < kOrthantPatterns; ++p) {
    const float e = magnitudes[0] - by_coordinate[p];
    dist[p] = e * e;
  }
  for (int k = 1; k < group; ++k) {
    const float m = magnitudes[k];
    const float* c = by_coordinate.data() + size_t(k) * kOrthantPatterns;
    for (int p = 0; p < kOrthantPatterns; ++p) {
      const float e = m - c[p];
      const float s = e * e;
      dist[p] += s;
    }
  }
  int best = 0;
  for (int p = 1; p < kOrthantPatterns; ++p)
    if (dist[p] < dist[best]) best = p;
  return best;
}

void tq_encode_orthant_row(const float* x, const OrthantCodebook& codebook, const Rotation& rotation, uint8_t* row,
                           TqScaleMode mode) {
  const int d = rotation.dim();
  if (codebook.dim != d) fail("tq{}o codebook is for d={} but the rotation is for d={}", codebook.bits, codebook.dim, d);
  check_tq_orthant_row_shape(d, codebook.bits);
  const int group = codebook.group, groups = d / group;
  float y[kMaxDim];
  uint8_t idx[kMaxDim / 4];

  const float n = rotated_unit_row(x, rotation, y);

  const float* pat = codebook.patterns.data();
  auto assign = [&](float inv_alpha) {
    float m[8];
    for (int g = 0; g < groups; ++g) {
      for (int k = 0; k < group; ++k) m[k] = std::abs(y[g * group + k]) * inv_alpha;
      idx[g] = static_cast<uint8_t>(codebook.nearest(m));
    }
  };
  // <|y|, yhat magnitudes> (= <y, yhat> with the signs of y) and ||yhat||^2, in double.
  auto sums = [&](double* yc, double* cc) {
    *yc = 0.0, *cc = 0.0;
    for (int g = 0; g < groups; ++g)
      for (int k = 0; k < group; ++k) {
        const double c = pat[size_t(idx[g]) * group + k];
        *yc += double(std::abs(y[g * group + k])) * c;
        *cc += c * c;
      }
  };
  assign(1.0f);
  const float scale = coded_row_scale(mode, n, idx, groups, assign, sums);
  std::memcpy(row, idx, size_t(groups));
  uint8_t* signs = row + groups;
  std::memset(signs, 0, size_t(d) / 8);
  for (int c = 0; c < d; ++c)
    if (std::signbit(y[c])) signs[c / 8] |= static_cast<uint8_t>(1u << (c % 8));
  const uint16_t s16 = tq_scale_to_fp16(scale);
  std::memcpy(row + groups + d / 8, &s16, sizeof s16);
}

}  // namespace tq
