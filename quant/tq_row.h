// One TurboQuant row (DESIGN.md section 5): the b-bit Lloyd-Max codes of a rotated unit vector
// plus one fp32 scale. This is the storage format of a K or V row of a `tq*` KV cache.
//
// Row layout (tq_row_bytes(d, b) = d*b/8 + 4 bytes: packed indices, then the fp32 scale) and the
// index packing are defined in kernels/tq_packing.h, the one place that defines them; the
// packing functions (check_tq_row_shape, tq_codes_bytes, tq_row_bytes, pack_indices,
// unpack_indices) are part of this header's API through that include.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/tq_packing.h"
#include "quant/codebook.h"
#include "quant/rotation.h"

namespace tq {

// What the stored scale is. norm_corrected (the default, DESIGN step 4): n / ||c[idx]||, so the
// reconstruction has exactly the norm of x. plain_norm: n itself (the paper's estimator).
// least_squares: n * <y, c> / ||c||^2 with the indices re-chosen for the scaled codebook (three
// rounds, or fewer once a round leaves them as they were: the same result), the per-row scale and indices of least squared error (about 8 % below norm_corrected
// at 4 bits, d = 64; tools/tq_scale_experiment.py); the norm is then not exact.
enum class TqScaleMode { norm_corrected, plain_norm, least_squares };

// "norm-corrected" | "norm" | "least-squares"; anything else fails with the valid names.
TqScaleMode parse_tq_scale_mode(std::string_view name);

// Encodes x (dim floats) into `row` (tq_row_bytes bytes):
//   n = ||x||, u = x/n, y = R u, idx_j = #{boundaries <= y_j}, scale per `mode`.
// A zero row stores scale 0 (and decodes to zeros); a non-finite row stores a non-finite scale.
// The codebook and rotation must be for the same dim.
void tq_encode_row(const float* x, const Codebook& codebook, const Rotation& rotation, uint8_t* row,
                   TqScaleMode mode = TqScaleMode::norm_corrected);

// Encodes a split row (kernels/tq_packing.h): x (dim floats, already permuted so the outlier
// group is the first half) as two half-rows, the first with codebook_hi / rotation_hi, the second
// with codebook_lo / rotation_lo (all for dim/2), scales stored as fp16.
void tq_encode_split_row(const float* x, const Codebook& codebook_hi, const Rotation& rotation_hi,
                         const Codebook& codebook_lo, const Rotation& rotation_lo, uint8_t* row,
                         TqScaleMode mode = TqScaleMode::norm_corrected);

// The stored scale of a row.
float tq_row_scale(const uint8_t* row, int dim, int bits);
// A scale as fp16 (split rows' halves and tq<b>h rows): clamped to fp16's largest finite value,
// non-finite kept non-finite. No real K/V row norm is near 65504.
uint16_t tq_scale_to_fp16(float scale);

// Reconstruction in rotated space, yhat = scale * c[idx] (what attention works with).
void tq_decode_row_rotated(const uint8_t* row, const Codebook& codebook, float* yhat);
// Full reconstruction, xhat = scale * R^T c[idx] (tests and tools only; attention never does this).
void tq_decode_row(const uint8_t* row, const Codebook& codebook, const Rotation& rotation,
                   float* xhat);

}  // namespace tq
