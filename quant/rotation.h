// Per-layer random orthogonal rotations for TurboQuant (DESIGN.md section 5).
//
// Rotating a vector by a uniformly random orthogonal matrix makes each coordinate follow the same
// known law (see codebook.h), which is what lets one scalar codebook quantize every coordinate.
// Each layer l gets its own rotation R_l, a pure function of (seed, l), shared by K and V.
//
//   dense:    R = Q of the QR decomposition of a d x d matrix G of iid N(0,1), with the columns
//             of Q sign-fixed so that diag(R_qr) > 0 (this makes Q Haar-distributed and unique).
//             Stored fp32 row-major; apply is a d x d matrix-vector product.
//   hadamard: R = H_d * diag(s) / sqrt(d), H_d the (unnormalized, Sylvester-ordered) Hadamard
//             matrix, H[i][j] = (-1)^popcount(i & j), and s random signs. Applied in O(d log d)
//             by a fast Walsh-Hadamard transform; d must be a power of two.
//   matrix:   an explicit d x d matrix supplied by the caller (e.g. `rot_matrices` loaded from a
//             safetensors file); it is used as given (orthogonality is the caller's promise).
//
// Randomness (documented so other implementations can reproduce it):
//   stream seed = splitmix64(splitmix64(seed) ^ splitmix64(0x5451'524F'5400'0000 + layer))
//   (0x5451524F54... is "TQROT" in ASCII; the double mixing keeps (seed, layer) and (seed', layer')
//   streams unrelated even when seeds differ by one), then std::mt19937_64 seeded with it
//   (its output sequence is fixed by the C++ standard, unlike std::normal_distribution's).
//   Uniforms: u = ((r >> 11) + 1) * 2^-53, in (0, 1]. Normals: Box-Muller on (u1, u2) gives
//   sqrt(-2 ln u1) cos(2 pi u2) then sqrt(-2 ln u1) sin(2 pi u2). G is filled row-major,
//   G[i][j] = normal number i*d + j. Hadamard signs: s_j = +1 if the top bit of the j-th raw
//   output is 0, else -1.
//   (Bit-for-bit identity across platforms also needs the libm's log/cos/sin to round alike;
//   glibc's do on x86-64 and aarch64. A last-bit difference there cannot change the fp32 matrix
//   except in rare ties.)
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace tq {

enum class RotationKind { dense, hadamard, matrix };

// "dense" | "hadamard"; anything else fails listing the valid names.
RotationKind parse_rotation_kind(std::string_view name);
std::string_view rotation_kind_name(RotationKind kind);

// The mt19937_64 seed for (seed, layer), as documented above.
uint64_t rotation_stream_seed(uint64_t seed, int layer);

class Rotation {
 public:
  Rotation() = default;

  // Builds R_layer for vectors of length dim. hadamard fails unless dim is a power of two.
  static Rotation make(RotationKind kind, int dim, uint64_t seed, int layer);
  // Wraps an explicit row-major dim x dim matrix.
  static Rotation from_matrix(int dim, std::vector<float> row_major);

  int dim() const { return dim_; }
  RotationKind kind() const { return kind_; }

  // y = R x (x, y: dim floats; they may be the same buffer).
  void apply(const float* x, float* y) const;
  // x = R^T y, the inverse of apply (they may be the same buffer).
  void apply_transpose(const float* y, float* x) const;

  // R as a row-major dim x dim matrix (materialized for hadamard), for tests and export.
  std::vector<float> to_matrix() const;
  // Hadamard sign vector s (empty for other kinds).
  const std::vector<float>& signs() const { return signs_; }

 private:
  RotationKind kind_ = RotationKind::dense;
  int dim_ = 0;
  std::vector<float> matrix_;    // dense / matrix: row-major R
  std::vector<float> matrix_t_;  // dense / matrix: row-major R^T, for the AVX-512 R x
  std::vector<float> signs_;   // hadamard: diag(s)
};

// In-place unnormalized fast Walsh-Hadamard transform, v <- H_n v, n a power of two.
void fwht_inplace(float* v, int n);

}  // namespace tq
