// Orthant codes for groups of rotated coordinates: the `tq3o` and `tq2o` rows (kv/kv_dtype.h).
//
// A b-bit scalar Lloyd-Max code of a rotated coordinate is a sign and a (b - 1)-bit magnitude; over
// a group of D coordinates its magnitudes form a product grid. These codes keep one sign bit a
// coordinate and code a group's D magnitudes jointly as the nearest of 256 patterns placed by
// Lloyd's algorithm on the folded normal (tools/gen_orthant_codebook.py writes the table):
// D = 4 at 3 bits and D = 8 at 2 bits, so a pattern index is one byte and a row has the bytes of
// tq3h / tq2h. The codebook is symmetric under every sign flip, so a group's nearest code is its
// own signs and the pattern nearest its magnitudes. Per coordinate of a standard normal:
// 0.0263 against the 3-bit scalar grid's 0.0345, 0.0947 against the 2-bit grid's 0.1175 (Max 1960).
//
// Row layout (tq_orthant_row_bytes(d, b) = d/D + d/8 + 2 bytes, D = 8 / (b - 1)):
//   [0, d/D)             byte g = the pattern of group g, coordinates g D .. g D + D - 1
//   [d/D, d/D + d/8)     bit c (byte c / 8, bit c % 8) set where rotated coordinate c is negative
//   [d/D + d/8, ... + 2) the row's scale, fp16
// Groups are runs of consecutive coordinates (after the random rotation any grouping has the same
// statistics), so a gather by pattern byte puts a row's magnitudes in its natural order, and the
// sign map, read as it is stored, is their bit mask (kernels/coded_row_avx512.cpp decodes so).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/rotation.h"
#include "quant/tq_row.h"

namespace tq {

inline constexpr int kOrthantPatterns = 256;

// Coordinates a pattern holds at `bits` (3 or 2): 4 or 8.
int orthant_group(int bits);

struct OrthantCodebook {
  int dim = 0;    // d, the row length the patterns are scaled for
  int bits = 0;   // 3 or 2
  int group = 0;  // D
  // [256][D] non-negative magnitudes in the units of one coordinate of a unit vector in R^d (the
  // generated standard-normal patterns divided by sqrt(d)).
  std::vector<float> patterns;
  // [D][256]: the same, coordinate-major, for the search.
  std::vector<float> by_coordinate;

  // Index of the pattern nearest `magnitudes` (D non-negative values) in Euclidean distance, the
  // smallest index among equals; pattern 0 for a NaN. nearest_scalar is the plain loop; nearest
  // gives its result bit for bit, 16 patterns at a time where the CPU has AVX-512.
  int nearest(const float* magnitudes) const;
  int nearest_scalar(const float* magnitudes) const;
};

// The codebook for rows of length `dim` at `bits`, built once per (dim, bits) and shared.
const OrthantCodebook& orthant_codebook(int dim, int bits);

// The generated standard-normal patterns ([256][orthant_group(bits)]), for tests and tools.
const float* orthant_codebook_standard_patterns(int bits);

// Fails unless bits is 3 or 2 and dim a multiple of 8 in 8..512.
void check_tq_orthant_row_shape(int dim, int bits);
size_t tq_orthant_row_bytes(int dim, int bits);

// Encodes x (dim floats) as a tq3o / tq2o row (tq_orthant_row_bytes bytes): n = ||x||, y = R (x / n),
// each coordinate's sign, each group's magnitudes to their nearest pattern, and the scale by `mode`
// as tq_encode_row does (least_squares: the scale and codes of least squared error, at most three
// alternating rounds, ending once a round leaves the codes as they were; norm_corrected:
// n / ||yhat||; plain_norm: n), stored as fp16. A zero row stores scale 0.
void tq_encode_orthant_row(const float* x, const OrthantCodebook& codebook, const Rotation& rotation, uint8_t* row,
                           TqScaleMode mode = TqScaleMode::least_squares);

}  // namespace tq
