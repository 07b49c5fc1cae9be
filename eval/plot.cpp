#include "eval/plot.h"

#include "errors/error.h"

#ifdef TQ_HAVE_GD
#include <gd.h>
#include <gdfontmb.h>
#include <gdfonts.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include <fmt/format.h>

#include "errors/error.h"

namespace tq {

bool png_plots_available() { return true; }

namespace {

constexpr int kWidth = 900, kHeight = 560;
constexpr int kLeft = 95, kRight = 190, kTop = 40, kBottom = 60;

// Image with ownership; saved as PNG.
struct Image {
  gdImagePtr im;
  Image(int w, int h) : im(gdImageCreateTrueColor(w, h)) {
    if (!im) fail("cannot allocate a {}x{} image", w, h);
    gdImageFilledRectangle(im, 0, 0, w - 1, h - 1, color(255, 255, 255));
  }
  ~Image() { gdImageDestroy(im); }
  int color(int r, int g, int b) const { return gdTrueColor(r, g, b); }
  void text(int x, int y, const std::string& s, bool big = false, int c = 0) const {
    gdImageString(im, big ? gdFontGetMediumBold() : gdFontGetSmall(), x, y,
                  reinterpret_cast<unsigned char*>(const_cast<char*>(s.c_str())), c);
  }
  void text_up(int x, int y, const std::string& s) const {
    gdImageStringUp(im, gdFontGetSmall(), x, y, reinterpret_cast<unsigned char*>(const_cast<char*>(s.c_str())), 0);
  }
  void save(const std::string& path) const {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) fail("cannot write the plot '{}'", path);
    gdImagePng(im, f);
    const bool ok = std::fclose(f) == 0;
    if (!ok) fail("cannot write the plot '{}'", path);
  }
};

const int kPalette[][3] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}, {148, 103, 189},
                           {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207}};

std::string tick_label(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e4 || a < 1e-3) return fmt::format("{:.1e}", v);
  return fmt::format("{:.4g}", v);
}

}  // namespace

void write_line_chart_png(const LineChart& chart, const std::string& path) {
  auto ty = [&](double y) { return chart.log_y ? std::log10(y) : y; };
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const PlotSeries& s : chart.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (chart.log_y && s.y[i] <= 0)) continue;
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, ty(s.y[i])), y1 = std::max(y1, ty(s.y[i]));
    }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 - x0 < 1e-12) x0 -= 0.5, x1 += 0.5;
  if (y1 - y0 < 1e-12) y0 -= 0.5, y1 += 0.5;
  const double xpad = 0.05 * (x1 - x0), ypad = 0.08 * (y1 - y0);
  x0 -= xpad, x1 += xpad, y0 -= ypad, y1 += ypad;
  const int pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + static_cast<int>((x - x0) / (x1 - x0) * pw); };
  auto py = [&](double y) { return kTop + ph - static_cast<int>((ty(y) - y0) / (y1 - y0) * ph); };

  Image img(kWidth, kHeight);
  const int grid = img.color(225, 225, 225), black = img.color(0, 0, 0);
  for (int i = 0; i <= 5; ++i) {
    const double xv = x0 + (x1 - x0) * i / 5, yv = y0 + (y1 - y0) * i / 5;
    const int gx = kLeft + pw * i / 5, gy = kTop + ph - ph * i / 5;
    gdImageLine(img.im, gx, kTop, gx, kTop + ph, grid);
    gdImageLine(img.im, kLeft, gy, kLeft + pw, gy, grid);
    img.text(gx - 15, kTop + ph + 6, tick_label(xv));
    img.text(22, gy - 6, tick_label(chart.log_y ? std::pow(10.0, yv) : yv));
  }
  gdImageRectangle(img.im, kLeft, kTop, kLeft + pw, kTop + ph, black);
  img.text(kLeft, 12, chart.title, true);
  img.text(kLeft + pw / 2 - 4 * static_cast<int>(chart.x_label.size()) / 2, kHeight - 28, chart.x_label);
  img.text_up(2 + 0, kTop + ph / 2 + 4 * static_cast<int>(chart.y_label.size()) / 2, chart.y_label);
  for (size_t si = 0; si < chart.series.size(); ++si) {
    const PlotSeries& s = chart.series[si];
    const int* rgb = kPalette[si % std::size(kPalette)];
    const int c = img.color(rgb[0], rgb[1], rgb[2]);
    gdImageSetThickness(img.im, 2);
    int prev_x = -1, prev_y = -1;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (chart.log_y && s.y[i] <= 0)) continue;
      const int X = px(s.x[i]), Y = py(s.y[i]);
      gdImageFilledEllipse(img.im, X, Y, 8, 8, c);
      if (s.lines && prev_x >= 0) gdImageLine(img.im, prev_x, prev_y, X, Y, c);
      prev_x = X, prev_y = Y;
    }
    gdImageSetThickness(img.im, 1);
    const int ly = kTop + 10 + 18 * static_cast<int>(si);
    gdImageFilledEllipse(img.im, kLeft + pw + 16, ly + 6, 8, 8, c);
    img.text(kLeft + pw + 26, ly, s.label);
  }
  img.save(path);
}

void write_heat_map_png(const HeatMap& map, const std::string& path) {
  const int rows = static_cast<int>(map.cells.size());
  const int cols = rows > 0 ? static_cast<int>(map.cells[0].size()) : 0;
  const int cell_w = std::max(24, std::min(80, 700 / std::max(cols, 1)));
  const int cell_h = std::max(16, std::min(40, 420 / std::max(rows, 1)));
  const int left = 110, top = 40, width = left + cols * cell_w + 120, height = top + rows * cell_h + 60;
  Image img(width, height);
  const int black = img.color(0, 0, 0);
  // 0 → red, 1 → green.
  auto shade = [&](double v) {
    if (!std::isfinite(v)) return img.color(200, 200, 200);
    v = std::clamp(v, 0.0, 1.0);
    return img.color(static_cast<int>(220 * (1 - v) + 30 * v), static_cast<int>(50 * (1 - v) + 170 * v), 60);
  };
  img.text(left, 12, map.title, true);
  for (int r = 0; r < rows; ++r) {
    const int y = top + r * cell_h;
    if (r < static_cast<int>(map.y_ticks.size())) img.text(8, y + cell_h / 2 - 6, map.y_ticks[r]);
    for (int c = 0; c < cols; ++c) {
      const int x = left + c * cell_w;
      gdImageFilledRectangle(img.im, x, y, x + cell_w - 2, y + cell_h - 2, shade(map.cells[r][c]));
    }
  }
  for (int c = 0; c < cols && c < static_cast<int>(map.x_ticks.size()); ++c)
    img.text(left + c * cell_w + 2, top + rows * cell_h + 4, map.x_ticks[c]);
  img.text(left, top + rows * cell_h + 24, map.x_label);
  img.text(8, top - 16, map.y_label);
  const int lx = left + cols * cell_w + 20;
  for (int i = 0; i <= 4; ++i) {
    const int y = top + i * 18;
    gdImageFilledRectangle(img.im, lx, y, lx + 14, y + 14, shade(1.0 - i / 4.0));
    img.text(lx + 20, y + 1, fmt::format("{:.2f}", 1.0 - i / 4.0));
  }
  gdImageRectangle(img.im, left - 1, top - 1, left + cols * cell_w - 1, top + rows * cell_h - 1, black);
  img.save(path);
}

}  // namespace tq
#else  // TQ_SLIM: no libgd

namespace tq {

bool png_plots_available() { return false; }
void write_line_chart_png(const LineChart&, const std::string& path) {
  fail("cannot write {}: this build has no PNG plots (configured with TQ_SLIM)", path);
}
void write_heat_map_png(const HeatMap&, const std::string& path) {
  fail("cannot write {}: this build has no PNG plots (configured with TQ_SLIM)", path);
}

}  // namespace tq
#endif
