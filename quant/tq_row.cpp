// TurboQuant row encode / decode and the index packing (layout documented in tq_row.h).
#include "quant/tq_row.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "errors/error.h"

namespace tq {
namespace {

// The strided rule of tq_row.h for b in {1, 2, 4}, on the field (idx >> shift) & (2^b - 1):
// byte c holds the fields of idx[c + k*S], S = d*b/8, at bit k*b. b = 3 calls it twice.
void pack_strided(const uint8_t* idx, int dim, int bits, int shift, uint8_t* out) {
  const int stride = dim * bits / 8, per_byte = 8 / bits;
  const unsigned mask = (1u << bits) - 1u;
  for (int c = 0; c < stride; ++c) {
    unsigned byte = 0;
    for (int k = 0; k < per_byte; ++k) byte |= ((idx[c + k * stride] >> shift) & mask) << (k * bits);
    out[c] = static_cast<uint8_t>(byte);
  }
}

// Inverse of pack_strided: ORs each field back in at `shift` (idx must start zeroed for b = 3).
void unpack_strided(const uint8_t* packed, int dim, int bits, int shift, uint8_t* idx) {
  const int stride = dim * bits / 8, per_byte = 8 / bits;
  const unsigned mask = (1u << bits) - 1u;
  for (int c = 0; c < stride; ++c) {
    const unsigned byte = packed[c];
    for (int k = 0; k < per_byte; ++k) {
      idx[c + k * stride] |= static_cast<uint8_t>(((byte >> (k * bits)) & mask) << shift);
    }
  }
}

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

}  // namespace

void check_tq_row_shape(int dim, int bits) {
  if (bits < 1 || bits > 4) fail("TurboQuant bits must be 1, 2, 3 or 4, got {}", bits);
  const int multiple = (bits == 4) ? 2 : (bits == 2) ? 4 : 8;
  if (dim <= 0 || dim % multiple != 0) {
    fail("TurboQuant {}-bit rows need head_dim to be a positive multiple of {}, got {}", bits,
         multiple, dim);
  }
}

size_t tq_codes_bytes(int dim, int bits) {
  check_tq_row_shape(dim, bits);
  return size_t(dim) * bits / 8;
}

size_t tq_row_bytes(int dim, int bits) { return tq_codes_bytes(dim, bits) + sizeof(float); }

void pack_indices(const uint8_t* idx, int dim, int bits, uint8_t* out) {
  check_tq_row_shape(dim, bits);
  if (bits == 3) {
    pack_strided(idx, dim, 2, 0, out);            // low two bits, d/4 bytes
    pack_strided(idx, dim, 1, 2, out + dim / 4);  // high bit, d/8 bytes
    return;
  }
  pack_strided(idx, dim, bits, 0, out);
}

void unpack_indices(const uint8_t* packed, int dim, int bits, uint8_t* idx) {
  check_tq_row_shape(dim, bits);
  std::memset(idx, 0, size_t(dim));
  if (bits == 3) {
    unpack_strided(packed, dim, 2, 0, idx);
    unpack_strided(packed + dim / 4, dim, 1, 2, idx);
    return;
  }
  unpack_strided(packed, dim, bits, 0, idx);
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
  const float scale = (mode == TqScaleMode::norm_corrected && n > 0.0f)
                          ? static_cast<float>(double(n) / std::sqrt(yhat2))
                          : n;

  // 5. Store.
  pack_indices(s.idx.data(), d, codebook.bits, row);
  std::memcpy(row + tq_codes_bytes(d, codebook.bits), &scale, sizeof(float));
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
