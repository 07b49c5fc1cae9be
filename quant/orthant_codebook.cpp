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

#if defined(__x86_64__) || defined(__i386__)
// GCC 12's 512-bit intrinsics pass _mm512_undefined_*() as the unused merge source, which
// -Wmaybe-uninitialized reports once they are inlined under a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#include "errors/error.h"
#include "kernels/coded_row.h"
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
  return orthant_pattern_coordinates(bits);
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
  return orthant_scale_offset(dim, bits) + sizeof(uint16_t);
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

int OrthantCodebook::nearest_scalar(const float* magnitudes) const {
  // All 256 distances, coordinate by coordinate, then the first smallest.
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

#if defined(__x86_64__) || defined(__i386__)
namespace {

// nearest_scalar with 16 patterns a vector: each distance the same rounded differences, squares and
// sums in the same order, then the least distance and its first pattern.
__attribute__((target("avx512f"))) int nearest_avx512(const float* by_coordinate, int group, const float* magnitudes) {
  for (int k = 0; k < group; ++k)
    if (magnitudes[k] != magnitudes[k]) return 0;  // NaN: no distance is smaller than pattern 0's
  constexpr int kVectors = kOrthantPatterns / 16;
  __m512 dist[kVectors];
  const __m512 m0 = _mm512_set1_ps(magnitudes[0]);
  for (int b = 0; b < kVectors; ++b) {
    const __m512 e = _mm512_sub_ps(m0, _mm512_loadu_ps(by_coordinate + 16 * b));
    dist[b] = _mm512_mul_ps(e, e);
  }
  for (int k = 1; k < group; ++k) {
    const __m512 m = _mm512_set1_ps(magnitudes[k]);
    const float* c = by_coordinate + size_t(k) * kOrthantPatterns;
    for (int b = 0; b < kVectors; ++b) {
      const __m512 e = _mm512_sub_ps(m, _mm512_loadu_ps(c + 16 * b));
      dist[b] = _mm512_add_ps(dist[b], _mm512_mul_ps(e, e));
    }
  }
  __m512 least = dist[0];
  for (int b = 1; b < kVectors; ++b) least = _mm512_min_ps(least, dist[b]);
  const __m512 best = _mm512_set1_ps(_mm512_reduce_min_ps(least));
  for (int b = 0; b < kVectors; ++b)
    if (const __mmask16 at = _mm512_cmp_ps_mask(dist[b], best, _CMP_EQ_OQ)) return 16 * b + __builtin_ctz(at);
  return 0;
}

bool cpu_has_avx512f() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

}  // namespace

int OrthantCodebook::nearest(const float* magnitudes) const {
  return cpu_has_avx512f() ? nearest_avx512(by_coordinate.data(), group, magnitudes) : nearest_scalar(magnitudes);
}
#else
int OrthantCodebook::nearest(const float* magnitudes) const { return nearest_scalar(magnitudes); }
#endif

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
  std::memcpy(row + orthant_scale_offset(d, codebook.bits), &s16, sizeof s16);
}

}  // namespace tq
