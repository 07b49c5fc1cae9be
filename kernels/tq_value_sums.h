// The weighted sum of 2-, 3- and 4-bit TurboQuant value rows in integer arithmetic
// (PagedAttentionArgs::int8_value_sums). For a tile of up to 16 rows and each query head h, the
// row's weight times its scale, w_i = p_hi * s_i, is rounded to an unsigned byte against the
// tile's largest (w8_i = round(w_i * 255 / max_i w_i)), the codebook's 2^b levels to int8 (the
// Int8Levels of kernels/tq_key_scores.h), and each coordinate's sum over the rows is an exact
// integer dot product, scaled back in fp32:
//
//   acc[h][c] = fma(float(sum_i w8_i * c8[idx_ic]), (max_i w_i / 255) * level_scale, acc[h][c] * correction[h])
//
// which adds the weighted sum of the rows s_i * level_scale * c8[idx] with the weights w8_i *
// max / 255 (tests check it against that in double precision). AVX-512 VNNI adds 4 rows' products
// per lane and instruction from bytes that a byte permutation and a table lookup made of the codes,
// where the fp32 form decodes every coordinate of every row to a float and multiplies it once per
// query head. The weights' rounding (half a step of 1/255 of the tile's largest, on small weights
// that matter little) varies from row to row; a cache whose rows were coded with levels on the int8
// grid (quant/codebook.h snapped_to_int8_grid, what kv/ does when this path is on) has no level
// rounding at all. docs/FIDELITY.md measures what it does to the model's next-token distribution.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/coded_row.h"
#include "kernels/tq_key_scores.h"

namespace tq {

constexpr int kInt8SumTile = 16;     // rows summed together
constexpr int kInt8SumMaxHeads = 64;  // query heads per call (per KV head)

// Every function below fails (tq::Error) for a format tq_value_sums_format refuses, n outside
// [0, 16] (or above the tile's) or heads outside [0, kInt8SumMaxHeads].
// Whether rows of this format can be summed here: TurboQuant, 2 to 4 bits, head_dim 64, 128, 256 or 512.
bool tq_value_sums_format(const CodedRowFormat& f);
// Whether this CPU runs the AVX-512 summer (AVX-512F, BW, VNNI, VBMI).
bool tq_value_sums_avx512_available();

// The reference. For `heads` query heads with weights p + h * 16 (lanes i < n; lanes past n are
// ignored) and rows[i] (i < n): acc + h * d gets the formula above, with correction[h]. Returns
// false, changing nothing, when a head's weights hold a negative or non-finite product p * s or their largest
// is so small that 255 / max overflows: the caller sums that tile in fp32.
bool tq_value_sums_scalar(const CodedRowFormat& f, const uint8_t* const rows[kInt8SumTile], int n, const float* p,
                           const float* correction, int heads, const Int8Levels& levels, float* acc);
// A tile of up to 16 rows laid out for the AVX-512 summer: per block of 16 coordinates and group
// of 4 rows, 64 level bytes (the 4 rows' bytes of one coordinate in each 32-bit lane), and the
// rows' scales (0 past n). Prepared once per tile of a KV head and summed for any number of
// queries' heads: a prefill chunk's tokens share it as they share the decoded fp32 tile.
struct TqValueTile {
  alignas(64) int8_t levels[512 / 16][4][64];  // [coordinate block][group of rows][bytes]
  alignas(64) float scale[kInt8SumTile];
  int n = 0;
  int dim = 0;
};
void tq_value_tile_avx512(const CodedRowFormat& f, const uint8_t* const rows[kInt8SumTile], int n,
                           const Int8Levels& levels, TqValueTile* tile);
// The AVX-512 summer over the first n <= tile.n rows of a prepared tile: tq_value_sums_scalar's
// result and return value for those rows, bit for bit (the tile's rows past n, whatever they hold,
// get weight 0). The caller checks the format and the CPU once, not per tile.
bool tq_value_sums_avx512(const TqValueTile& tile, int n, const float* p, const float* correction, int heads,
                           const Int8Levels& levels, float* acc);

}  // namespace tq
