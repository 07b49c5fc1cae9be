// Lloyd-Max scalar codebooks for one coordinate of a randomly rotated unit vector (TurboQuant,
// DESIGN.md section 5). After a random rotation every coordinate of a unit vector in R^d has the
// same known law, so one optimal scalar quantizer for that law serves every coordinate.
//
// Two laws are offered:
//   gaussian: N(0, 1/d), the large-d limit and the reference implementation's choice.
//   beta:     the exact marginal, density proportional to (1 - t^2)^((d-3)/2) on [-1, 1].
// Both are computed at start-up (a few milliseconds) by Lloyd iterations with adaptive
// Gauss-Legendre quadrature, deterministically, so every process builds bit-identical tables.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace tq {

enum class CodebookKind { gaussian, beta };

// "gaussian" | "beta"; anything else fails with the valid names.
CodebookKind parse_codebook_kind(std::string_view name);
std::string_view codebook_kind_name(CodebookKind kind);

struct Codebook {
  CodebookKind kind = CodebookKind::gaussian;
  int dim = 0;   // d, the vector length the codebook is for
  int bits = 0;  // b; there are 2^b levels

  // 2^b reconstruction levels, ascending, in the units of one coordinate of a unit vector
  // (so of order 1/sqrt(d)). Exactly antisymmetric: centroids[i] == -centroids[L-1-i].
  std::vector<float> centroids;
  // 2^b - 1 decision boundaries, the midpoints of neighbouring centroids (the Lloyd-Max
  // nearest-neighbour condition). A value v maps to index = #{boundaries <= v}.
  std::vector<float> boundaries;

  // Expected squared error of one coordinate, E[(t - Q(t))^2], in the same units.
  double mse_per_coord = 0.0;
  // Lloyd iterations the solver needed (reported in tests; not part of the contract).
  int iterations = 0;

  int levels() const { return 1 << bits; }
  // D_mse of the paper: E||u - uhat||^2 for a unit vector u = d * per-coordinate MSE.
  double mse_per_vector() const { return mse_per_coord * dim; }
  // Index of the level a value falls into: the number of boundaries <= v.
  int index_of(float v) const;
};

// The 2^bits-level Lloyd-Max quantizer of a standard normal variable, bits in 1..kMaxChannelBits
// (dim is 1; levels and mse_per_coord in units of the standard deviation). The channel-bit rows
// of quant/channel_bits.h code each coordinate of the calibrated basis with one of these.
inline constexpr int kMaxChannelBits = 6;
Codebook make_standard_gaussian_codebook(int bits);

// Builds the 2^bits-level Lloyd-Max codebook. bits in 1..4; dim >= 3 (at d = 3 the beta law is
// uniform; below it the density has endpoint singularities and no KV head is that small).
// Fails (tq::fail) on other arguments or if the iteration does not converge.
Codebook make_codebook(CodebookKind kind, int dim, int bits);

// The codebook with its levels moved to the nearest multiple of (largest level / 127), and the
// boundaries to the moved levels' midpoints (so each value still goes to its nearest level);
// mse_per_coord stays the Lloyd-Max figure. The integer attention arithmetic
// (kernels/tq_key_scores.h, kernels/tq_value_sums.h) holds a codebook as int8 times one scale:
// a cache whose rows were coded with levels on that grid reads them exactly, where rounding the
// Lloyd-Max levels afterwards is one error shared by every row (docs/FIDELITY.md measures both).
Codebook snapped_to_int8_grid(Codebook cb);

// The same solver in the standardized variable s = t * sqrt(d), in double precision, exposed
// for tests and tools: returns the ascending levels and sets *mse to the per-coordinate MSE in
// s units (equal to D_mse per unit vector).
std::vector<double> lloyd_max_standardized(CodebookKind kind, int dim, int bits, double* mse,
                                           int* iterations = nullptr);

}  // namespace tq
