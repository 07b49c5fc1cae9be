// TurboQuant row encode / decode (the packing lives in kernels/tq_packing.cpp).
#include "quant/tq_row.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "errors/error.h"
#include "kernels/dequantize.h"

namespace tq {
namespace {

void check_pair(const Codebook& codebook, int rotation_dim) {
  if (codebook.dim != rotation_dim) {
    fail("TurboQuant codebook is for d={} but the rotation is for d={}", codebook.dim,
         rotation_dim);
  }
  check_tq_row_shape(codebook.dim, codebook.bits);
}

struct Scratch {
  std::vector<float> u, y;
  std::vector<uint8_t> idx;
};
Scratch& scratch(int n) {
  thread_local Scratch s;
  if (s.u.size() < size_t(n)) {
    s.u.resize(n);
    s.y.resize(n);
    s.idx.resize(n);
  }
  return s;
}

// A half-row of at most 256 values at 4 bits, plus its scale.
constexpr size_t kMaxSplitHalfBytes = 256 / 2 + 4;

}  // namespace

// fp16 keeps 11 significant bits; a scale beyond its range saturates rather than becoming infinite.
uint16_t tq_scale_to_fp16(float s) { return fp32_to_fp16(std::isfinite(s) ? std::fmin(s, 65504.0f) : s); }

TqScaleMode parse_tq_scale_mode(std::string_view name) {
  if (name == "norm-corrected") return TqScaleMode::norm_corrected;
  if (name == "norm") return TqScaleMode::plain_norm;
  if (name == "least-squares") return TqScaleMode::least_squares;
  fail("--tq-scale '{}' is not one of: norm-corrected, norm, least-squares", name);
}

void tq_encode_row(const float* x, const Codebook& codebook, const Rotation& rotation, uint8_t* row,
                   TqScaleMode mode) {
  const int d = rotation.dim();
  check_pair(codebook, d);
  Scratch& s = scratch(d);

  // 1. n = ||x|| (double accumulation, stored as fp32).
  double sum = 0.0;
  for (int j = 0; j < d; ++j) sum += double(x[j]) * x[j];
  const float n = static_cast<float>(std::sqrt(sum));

  // 2. u = x / n, y = R u. A zero row rotates the zero vector (all indices land next to 0).
  const float inv = n > 0.0f ? 1.0f / n : 0.0f;
  for (int j = 0; j < d; ++j) s.u[j] = x[j] * inv;
  rotation.apply(s.u.data(), s.y.data());

  // 3. idx_j = #{boundaries <= y_j}: a branch-free count over at most 15 boundaries.
  const std::vector<float>& bounds = codebook.boundaries;
  const std::vector<float>& levels = codebook.centroids;
  double yhat2 = 0.0;
  for (int j = 0; j < d; ++j) {
    int k = 0;
    for (float b : bounds) k += (b <= s.y[j]) ? 1 : 0;
    s.idx[j] = static_cast<uint8_t>(k);
    yhat2 += double(levels[k]) * levels[k];
  }

  // 4. Norm correction: ||scale * R^T yhat|| = scale * ||yhat|| = n. Every level is nonzero
  //    (the codebook is antisymmetric with an even count), so ||yhat|| > 0.
  float scale = (mode == TqScaleMode::norm_corrected && n > 0.0f) ? static_cast<float>(double(n) / std::sqrt(yhat2)) : n;
  if (mode == TqScaleMode::least_squares && n > 0.0f) {
    // Alternate the best scale for the indices and the best indices for the scale.
    double alpha = 1.0;
    for (int round = 0; round < 3; ++round) {
      double yc = 0.0, cc = 0.0;
      for (int j = 0; j < d; ++j) yc += double(s.y[j]) * levels[s.idx[j]], cc += double(levels[s.idx[j]]) * levels[s.idx[j]];
      if (!(yc > 0.0)) break;
      alpha = yc / cc;
      const float inv_alpha = static_cast<float>(1.0 / alpha);
      bool changed = false;
      for (int j = 0; j < d; ++j) {
        int k = 0;
        for (float b : bounds) k += (b <= s.y[j] * inv_alpha) ? 1 : 0;
        changed |= s.idx[j] != k;
        s.idx[j] = static_cast<uint8_t>(k);
      }
      // The same indices give the same scale, and that scale the same indices: the rounds left
      // would change nothing.
      if (!changed) break;
    }
    double yc = 0.0, cc = 0.0;
    for (int j = 0; j < d; ++j) yc += double(s.y[j]) * levels[s.idx[j]], cc += double(levels[s.idx[j]]) * levels[s.idx[j]];
    if (yc > 0.0) alpha = yc / cc;
    scale = static_cast<float>(double(n) * alpha);
  }

  // 5. Store.
  pack_indices(s.idx.data(), d, codebook.bits, row);
  std::memcpy(row + tq_codes_bytes(d, codebook.bits), &scale, sizeof(float));
}

void tq_encode_split_row(const float* x, const Codebook& codebook_hi, const Rotation& rotation_hi,
                         const Codebook& codebook_lo, const Rotation& rotation_lo, uint8_t* row,
                         TqScaleMode mode) {
  const int h = rotation_hi.dim();
  if (rotation_lo.dim() != h) fail("TurboQuant split row: half-row rotations differ in size ({} vs {})", h, rotation_lo.dim());
  check_tq_split_row_shape(2 * h, codebook_hi.bits, codebook_lo.bits);
  uint8_t half[kMaxSplitHalfBytes];
  const size_t hi_codes = tq_codes_bytes(h, codebook_hi.bits), lo_codes = tq_codes_bytes(h, codebook_lo.bits);
  uint16_t scales[2];
  tq_encode_row(x, codebook_hi, rotation_hi, half, mode);
  std::memcpy(row, half, hi_codes);
  scales[0] = tq_scale_to_fp16(tq_row_scale(half, h, codebook_hi.bits));
  tq_encode_row(x + h, codebook_lo, rotation_lo, half, mode);
  std::memcpy(row + hi_codes, half, lo_codes);
  scales[1] = tq_scale_to_fp16(tq_row_scale(half, h, codebook_lo.bits));
  std::memcpy(row + hi_codes + lo_codes, scales, sizeof scales);
}

float tq_row_scale(const uint8_t* row, int dim, int bits) {
  float scale;
  std::memcpy(&scale, row + tq_codes_bytes(dim, bits), sizeof(float));
  return scale;
}

void tq_decode_row_rotated(const uint8_t* row, const Codebook& codebook, float* yhat) {
  const int d = codebook.dim;
  check_tq_row_shape(d, codebook.bits);
  Scratch& s = scratch(d);
  unpack_indices(row, d, codebook.bits, s.idx.data());
  const float scale = tq_row_scale(row, d, codebook.bits);
  for (int j = 0; j < d; ++j) yhat[j] = scale * codebook.centroids[s.idx[j]];
}

void tq_decode_row(const uint8_t* row, const Codebook& codebook, const Rotation& rotation,
                   float* xhat) {
  check_pair(codebook, rotation.dim());
  tq_decode_row_rotated(row, codebook, xhat);
  rotation.apply_transpose(xhat, xhat);
}

}  // namespace tq
