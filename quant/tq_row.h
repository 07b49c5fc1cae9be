// One TurboQuant row (DESIGN.md section 5): the b-bit Lloyd-Max codes of a rotated unit vector
// plus one fp32 scale. This is the storage format of a K or V row of a `tq*` KV cache.
//
// Row layout, tq_row_bytes(d, b) = d*b/8 + 4 bytes:
//   [0, d*b/8)         packed indices (layout below)
//   [d*b/8, d*b/8 + 4) scale, fp32 in host byte order (little-endian on every supported target)
//
// Index packing. For b in {1, 2, 4} one rule covers all three: with S = d*b/8 bytes and
// m = 8/b indices per byte, byte c (0 <= c < S) holds idx[c + k*S] in bits [k*b, (k+1)*b) for
// k = 0..m-1. A byte thus holds m indices that are S apart, so that a SIMD kernel unpacking a run
// of bytes with one shift+mask gets a run of consecutive coordinates:
//   b = 4: byte c (c < d/2) = idx[c] | idx[c + d/2] << 4               (reference layout, exactly)
//   b = 2: byte c (c < d/4) = idx[c] | idx[c+d/4] << 2 | idx[c+d/2] << 4 | idx[c+3d/4] << 6
//   b = 1: byte c (c < d/8) = sum_k idx[c + k*d/8] << k, k = 0..7
// b = 3 is the 2-bit layout of the low two bits followed by the 1-bit layout of the high bit:
//   bytes [0, d/4)        = the b = 2 packing of (idx & 3)
//   bytes [d/4, d/4+d/8)  = the b = 1 packing of (idx >> 2)
// which is dense (3d/8 bytes) and lets a kernel reuse the 2-bit and 1-bit unpack paths.
// Requirements on d: even for b = 4, a multiple of 4 for b = 2, of 8 for b = 1 and 3.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant/codebook.h"
#include "quant/rotation.h"

namespace tq {

// Fails unless bits is 1..4 and dim satisfies the packing requirement above.
void check_tq_row_shape(int dim, int bits);
// Bytes of packed indices, d*b/8.
size_t tq_codes_bytes(int dim, int bits);
// Bytes of a whole row, d*b/8 + 4.
size_t tq_row_bytes(int dim, int bits);

// The packing, defined here and only here. idx values must be < 2^bits (higher bits are
// ignored). out / idx are tq_codes_bytes(dim, bits) / dim bytes.
void pack_indices(const uint8_t* idx, int dim, int bits, uint8_t* out);
void unpack_indices(const uint8_t* packed, int dim, int bits, uint8_t* idx);

// What the stored scale is. norm_corrected (the default, DESIGN step 4): n / ||c[idx]||, so the
// reconstruction has exactly the norm of x. plain_norm: n itself (the paper's estimator).
enum class TqScaleMode { norm_corrected, plain_norm };

// Encodes x (dim floats) into `row` (tq_row_bytes bytes):
//   n = ||x||, u = x/n, y = R u, idx_j = #{boundaries <= y_j}, scale per `mode`.
// A zero row stores scale 0 (and decodes to zeros); a non-finite row stores a non-finite scale.
// The codebook and rotation must be for the same dim.
void tq_encode_row(const float* x, const Codebook& codebook, const Rotation& rotation, uint8_t* row,
                   TqScaleMode mode = TqScaleMode::norm_corrected);

// The stored scale of a row.
float tq_row_scale(const uint8_t* row, int dim, int bits);

// Reconstruction in rotated space, yhat = scale * c[idx] (what attention works with).
void tq_decode_row_rotated(const uint8_t* row, const Codebook& codebook, float* yhat);
// Full reconstruction, xhat = scale * R^T c[idx] (tests and tools only; attention never does this).
void tq_decode_row(const uint8_t* row, const Codebook& codebook, const Rotation& rotation,
                   float* xhat);

}  // namespace tq
