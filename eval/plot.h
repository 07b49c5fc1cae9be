// Small PNG charts for the fidelity tools, drawn with libgd (Debian libgd-dev): a scatter/line
// chart of labelled series and a heat map with a value legend. Axes are linear, with ticks.
#pragma once
#include <string>
#include <vector>

namespace tq {

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;
  bool lines = false;  // connect the points in order
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
  bool log_y = false;  // log10 axis for y (values <= 0 are skipped)
};

// False in a TQ_SLIM build (no libgd): the writers below then fail saying so.
bool png_plots_available();

// Writes the chart as a PNG; fails naming the path when it cannot be written.
void write_line_chart_png(const LineChart& chart, const std::string& path);

struct HeatMap {
  std::string title, x_label, y_label;
  std::vector<std::string> x_ticks, y_ticks;  // column / row labels
  std::vector<std::vector<double>> cells;     // [row][col] in [0, 1]; NaN: no data
};

void write_heat_map_png(const HeatMap& map, const std::string& path);

}  // namespace tq
