// A 2-D codebook for pairs of rotated coordinates: the `tq4p` rows (kv/kv_dtype.h).
//
// TurboQuant's scalar Lloyd-Max quantizer codes each rotated coordinate alone, on a 16 x 16 grid
// per pair of coordinates, and spends codepoints in the grid's corners, where the (nearly normal,
// nearly independent) pair has little mass. This codebook is 256 points placed by Lloyd's
// algorithm on the bivariate normal itself, constrained to its mirror symmetry (64 points fitted
// to the folded quadrant and mirrored into the four; tools/gen_pair_codebook.py writes the table),
// so a pair takes one byte, 4 bits per coordinate as in tq4, at a lower squared error: 0.00782 per
// coordinate of a standard normal pair against the scalar grid's 0.00946, 0.0070 against 0.0082
// per unit row at d = 64 with the least-squares row scale (docs/FIDELITY.md, "Pairs").
//
// Row layout (tq_pair_row_bytes(d) = d/2 + 2 bytes):
//   [0, d/2)      byte c = the code of the pair (y_c, y_{c + d/2}) of the rotated row y
//   [d/2, d/2+2)  the row's scale, fp16
// so that a SIMD decoder turning a run of bytes into points writes two runs of consecutive
// coordinates, as the 4-bit scalar layout (kernels/tq_packing.h) does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/rotation.h"
#include "quant/tq_row.h"

namespace tq {

inline constexpr int kPairCodebookPoints = 256;

struct PairCodebook {
  int dim = 0;  // d, the row length the points are scaled for
  // [256][2]: point i is (points[2i], points[2i + 1]), in the units of one coordinate of a unit
  // vector in R^d (the generated standard-normal points divided by sqrt(d)).
  std::vector<float> points;

  // Index of the point nearest (x, y) in Euclidean distance, the smallest index among equals:
  // the same result as comparing all 256 (nearest_exhaustive), found through a grid of cells
  // each listing the points whose region can reach it.
  int nearest(float x, float y) const;
  int nearest_exhaustive(float x, float y) const;

  // The grid: cells x cells squares over [-extent, extent]^2; cell k's candidates are
  // candidates[cell_start[k] .. cell_start[k + 1]), ascending.
  float extent = 0.0f;
  int cells = 0;
  std::vector<uint32_t> cell_start;
  std::vector<uint8_t> candidates;
};

// The codebook for rows of length `dim` (even, 2..512), built once per (dim, int8_grid) and shared.
// int8_grid: every coordinate moved to the nearest multiple of (largest coordinate / 127), the
// grid the integer attention arithmetic holds the points on (as quant/codebook.h
// snapped_to_int8_grid does for the scalar levels), so that it reads exactly what rows were coded with.
const PairCodebook& pair_codebook(int dim, bool int8_grid = false);

// The generated standard-normal points ([256][2]), for tests and tools.
const float* pair_codebook_standard_points();

// Fails unless dim is even and in 2..512.
void check_tq_pair_row_shape(int dim);
size_t tq_pair_row_bytes(int dim);

// Encodes x (dim floats) as a tq4p row (tq_pair_row_bytes bytes): n = ||x||, y = R (x / n), each
// pair (y_c, y_{c+d/2}) to its nearest point, and the scale by `mode` as tq_encode_row does
// (least_squares: the scale and codes of least squared error, at most three alternating rounds, ending once a round leaves the codes as they were;
// norm_corrected: n / ||yhat||; plain_norm: n), stored as fp16. A zero row stores scale 0.
void tq_encode_pair_row(const float* x, const PairCodebook& codebook, const Rotation& rotation, uint8_t* row,
                        TqScaleMode mode = TqScaleMode::least_squares);

}  // namespace tq
