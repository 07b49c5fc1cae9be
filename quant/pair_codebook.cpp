// The tq4p pair codebook: its grid search and the row encoder. Compiled without contraction
// (CMakeLists.txt): a distance is two rounded squares and one rounded sum in every build, so the
// grid search and the exhaustive one agree bit for bit, and another device's encoder can too.
#include "quant/pair_codebook.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "errors/error.h"
#include "quant/coded_row_scale.h"

namespace tq {
namespace {

constexpr float kStandardPoints[2 * kPairCodebookPoints] = {
#include "quant/pair_codebook_points.inc"
};

// Grid over [-4, 4]^2 in standard units, 64 cells a side: a cell lists 1-6 points. A pair of
// independent normals leaves it about once in 7900; those are searched exhaustively.
constexpr double kStandardExtent = 4.0;
constexpr int kCells = 64;

inline float squared_distance(float x, float y, const float* p) {
  const float dx = x - p[0], dy = y - p[1];
  const float xx = dx * dx, yy = dy * dy;
  return xx + yy;
}

PairCodebook build(int dim, bool int8_grid) {
  PairCodebook cb;
  cb.dim = dim;
  const double unit = 1.0 / std::sqrt(double(dim));
  cb.points.resize(2 * kPairCodebookPoints);
  for (int i = 0; i < 2 * kPairCodebookPoints; ++i) cb.points[i] = static_cast<float>(kStandardPoints[i] * unit);
  if (int8_grid) {
    float top = 0;
    for (float p : cb.points) top = std::max(top, std::abs(p));
    const float step = top / 127.0f;
    for (float& p : cb.points) p = std::nearbyint(p / step) * step;  // stays mirror-symmetric
  }
  cb.extent = static_cast<float>(kStandardExtent * unit);
  cb.cells = kCells;
  // A point can be nearest somewhere in a cell only if its least distance to the cell is at most
  // the smallest greatest distance of any point to the cell (that point is at least as near
  // everywhere in it). Doubles with a relative slack keep the lists supersets of the exact ones.
  const double width = 2.0 * double(cb.extent) / kCells;
  cb.cell_start.assign(size_t(kCells) * kCells + 1, 0);
  for (int cy = 0; cy < kCells; ++cy) {
    for (int cx = 0; cx < kCells; ++cx) {
      const double x0 = -double(cb.extent) + cx * width, x1 = x0 + width;
      const double y0 = -double(cb.extent) + cy * width, y1 = y0 + width;
      double least_far = INFINITY;
      double near[kPairCodebookPoints];
      for (int i = 0; i < kPairCodebookPoints; ++i) {
        const double px = cb.points[2 * i], py = cb.points[2 * i + 1];
        const double fx = std::max(std::abs(px - x0), std::abs(px - x1)), fy = std::max(std::abs(py - y0), std::abs(py - y1));
        const double nx = std::max({x0 - px, 0.0, px - x1}), ny = std::max({y0 - py, 0.0, py - y1});
        least_far = std::min(least_far, fx * fx + fy * fy);
        near[i] = nx * nx + ny * ny;
      }
      const double bound = least_far * (1.0 + 1e-6) + 1e-12;
      for (int i = 0; i < kPairCodebookPoints; ++i)
        if (near[i] <= bound) cb.candidates.push_back(static_cast<uint8_t>(i));
      cb.cell_start[size_t(cy) * kCells + cx + 1] = static_cast<uint32_t>(cb.candidates.size());
    }
  }
  return cb;
}

}  // namespace

const float* pair_codebook_standard_points() { return kStandardPoints; }

void check_tq_pair_row_shape(int dim) {
  if (dim < 2 || dim > 512 || dim % 2 != 0) fail("tq4p rows code pairs of coordinates and need an even head_dim in 2..512, got {}", dim);
}

size_t tq_pair_row_bytes(int dim) {
  check_tq_pair_row_shape(dim);
  return size_t(dim) / 2 + sizeof(uint16_t);
}

const PairCodebook& pair_codebook(int dim, bool int8_grid) {
  check_tq_pair_row_shape(dim);
  static std::mutex mutex;
  static std::map<std::pair<int, bool>, std::unique_ptr<PairCodebook>> built;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<PairCodebook>& cb = built[{dim, int8_grid}];
  if (!cb) cb = std::make_unique<PairCodebook>(build(dim, int8_grid));
  return *cb;
}

int PairCodebook::nearest_exhaustive(float x, float y) const {
  int best = 0;
  float best_d = squared_distance(x, y, points.data());
  for (int i = 1; i < kPairCodebookPoints; ++i) {
    const float dd = squared_distance(x, y, points.data() + 2 * i);
    if (dd < best_d) best_d = dd, best = i;
  }
  return best;
}

int PairCodebook::nearest(float x, float y) const {
  // Outside the grid, or not a number: the exhaustive search (which keeps point 0 for a NaN).
  if (!(std::abs(x) < extent) || !(std::abs(y) < extent)) return nearest_exhaustive(x, y);
  // The cell in double, as the lists were built: a float index could put a query within ~1e-5 of a
  // cell's width of its border in the neighbouring cell, whose list was not built for it.
  const double scale = double(cells) / (2.0 * double(extent));
  const int cx = std::min(cells - 1, std::max(0, static_cast<int>((double(x) + double(extent)) * scale)));
  const int cy = std::min(cells - 1, std::max(0, static_cast<int>((double(y) + double(extent)) * scale)));
  const size_t cell = size_t(cy) * cells + cx;
  int best = -1;
  float best_d = INFINITY;
  for (uint32_t k = cell_start[cell]; k < cell_start[cell + 1]; ++k) {
    const int i = candidates[k];
    const float dd = squared_distance(x, y, points.data() + 2 * i);
    if (dd < best_d) best_d = dd, best = i;
  }
  return best >= 0 ? best : nearest_exhaustive(x, y);
}

void tq_encode_pair_row(const float* x, const PairCodebook& codebook, const Rotation& rotation, uint8_t* row,
                        TqScaleMode mode) {
  const int d = rotation.dim();
  if (codebook.dim != d) fail("tq4p codebook is for d={} but the rotation is for d={}", codebook.dim, d);
  check_tq_pair_row_shape(d);
  const int h = d / 2;
  float y[512];
  uint8_t idx[256];

  const float n = rotated_unit_row(x, rotation, y);

  const float* p = codebook.points.data();
  auto assign = [&](float inv_alpha) {
    for (int c = 0; c < h; ++c) idx[c] = static_cast<uint8_t>(codebook.nearest(y[c] * inv_alpha, y[c + h] * inv_alpha));
  };
  // <y, yhat> and ||yhat||^2 of the codes, in double.
  auto sums = [&](double* yc, double* cc) {
    *yc = 0.0, *cc = 0.0;
    for (int c = 0; c < h; ++c) {
      const double px = p[2 * idx[c]], py = p[2 * idx[c] + 1];
      *yc += double(y[c]) * px + double(y[c + h]) * py;
      *cc += px * px + py * py;
    }
  };
  assign(1.0f);
  const float scale = coded_row_scale(mode, n, idx, h, assign, sums);
  std::memcpy(row, idx, size_t(h));
  const uint16_t s16 = tq_scale_to_fp16(scale);
  std::memcpy(row + h, &s16, sizeof s16);
}

}  // namespace tq
