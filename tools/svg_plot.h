// A small line-chart writer for the bench reports: axes with ticks, labels, polylines with point
// markers and a legend, as a standalone SVG file any browser opens. No external dependencies.
#pragma once
#include <string>
#include <vector>

namespace agentkv::tools {

struct PlotSeries {
  std::string name;
  std::vector<double> xs;
  std::vector<double> ys;
  bool dashed = false;
  bool points_only = false;  // a scatter: traces mix many steps at nearby depths, lines would zig-zag
};

struct LinePlot {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<PlotSeries> series;
  bool log_x = false;                 // depths span decades: log scale keeps small ones readable
  std::vector<double> y_reference;    // horizontal guide lines (e.g. ratio 1.0)
};

// The SVG text of the plot. Non-finite points are skipped; an empty plot still renders its axes.
std::string render_svg(const LinePlot& plot);
// Writes render_svg(plot) to path; agentkv::Error when the file cannot be written.
void write_svg(const std::string& path, const LinePlot& plot);

}  // namespace agentkv::tools
