// Channel bits: the rows of a KV head coded in a calibrated orthonormal basis, each coordinate
// with the number of bits its share of the error deserves (the `tq4c`, `tq3c`, `tq2c` row formats).
//
// A random rotation (the tq<b> formats) spreads a row's energy evenly over its coordinates, so
// every coordinate gets the same bits. Keys are far from isotropic: a few directions carry most
// of their variance, and queries read some directions much more than others. Coding gain comes
// from the opposite move: take the principal axes of the centred rows (PCA of the calibration
// text's rows), and give axis i bits by reverse water-filling on its importance, the variance
// lambda_i times (keys) the mean square query component w_i along it, which is axis i's share of
// the expected squared score error E[(q . e)^2] = sum_i w_i D_i (errors of different axes are
// independent). Coordinates are stored divided by their standard deviation, so one unit-variance
// Lloyd-Max codebook per bit width serves every axis, and one fp16 scale per row absorbs the
// row's own size. Attention maps the query into the same space once per head
// (q'' = diag(sigma) U q), so scores are dot products with the decoded codes and no row is ever
// mapped back.
//
// The layout (how many coordinates get how many bits) is shared by the KV heads of a layer, so
// every row of a layer side has the same bytes; each head has its own basis and sigmas. Bits are
// allocated to groups of 8 consecutive axes (the packing's unit), 0..kMaxChannelBits each, and
// add up to exactly avg_bits per coordinate, so a tq3c row has the bytes of a tq3h row.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/codebook.h"

namespace tq {

inline constexpr int kChannelGroup = 8;  // axes per allocation unit

// One KV head's calibrated axes.
struct ChannelSpectrum {
  int dim = 0;
  std::vector<double> basis;       // [dim][dim] row-major: row i is the i-th axis, most important first
  std::vector<double> variance;    // [dim] variance of the rows along axis i
  std::vector<double> importance;  // [dim] variance times the mean square query component (keys), or variance
};

// cov: [dim*dim] second moment of the rows about the centre they will be coded around; query:
// [dim*dim] second moment of the queries that read them, or empty (values: every axis read alike).
// Eigen-decomposes cov (LAPACK dsyev), fixes each axis's sign (largest component positive) and
// orders the axes by importance (ties by index), so the result is a function of the inputs.
ChannelSpectrum channel_spectrum(const std::vector<double>& cov, const std::vector<double>& query, int dim);

// Runs of axes in basis order, most bits first: part i is part_dims[i] axes (a multiple of 8)
// at part_bits[i] bits (0 = not stored; decoded as 0).
struct ChannelLayout {
  std::vector<int> part_dims, part_bits;
  int dim() const;
  int total_bits() const;  // sum of part_dims[i] * part_bits[i]
};

// Greedy reverse water-filling over groups of 8 axes with the Lloyd-Max distortions of the
// standard normal: each step gives one more bit (per axis of the group) to the group whose
// summed importance over the heads falls most. avg_bits in 1..kMaxChannelBits; dim % 8 == 0.
ChannelLayout allocate_channel_bits(const std::vector<ChannelSpectrum>& heads, int avg_bits);

// What a layer side's row codec needs.
struct ChannelCoding {
  ChannelLayout layout;
  std::vector<std::vector<float>> basis;  // [kv head][dim*dim], row i = axis i
  std::vector<std::vector<float>> sigma;  // [kv head][dim], the axes' standard deviations (floored)
};
ChannelCoding channel_coding(const std::vector<ChannelSpectrum>& heads, int avg_bits);

// Row bytes: the packed codes of every part (kernels/tq_packing.h, channel parts) then an fp16
// scale.
size_t channel_row_bytes(const ChannelLayout& layout);

// Encodes y (dim values in storage space: axis coordinates divided by sigma) into `row`.
// codebooks[b] is make_standard_gaussian_codebook(b) for every b the layout uses (index 0
// unused). sigma: the axes' standard deviations. The scale is the least-squares one for the
// row's error in its own space (each axis weighted by sigma^2: a fit in storage space, where
// every axis weighs the same, measured 5x worse on some SmolLM2 layers), the indices re-chosen
// for it three times; a zero row stores scale 0, a non-finite one a non-finite scale.
void encode_channel_row(const float* y, const ChannelLayout& layout, const std::vector<Codebook>& codebooks,
                        const float* sigma, uint8_t* row);

}  // namespace tq
