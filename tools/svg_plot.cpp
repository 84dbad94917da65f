#include "tools/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

#include "agentkv/error.h"

namespace agentkv::tools {
namespace {

constexpr double kWidth = 760, kHeight = 460;
constexpr double kLeft = 80, kRight = 190, kTop = 40, kBottom = 60;  // right margin holds the legend
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string fmt(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e6 || a < 1e-3)) std::snprintf(buf, sizeof buf, "%.2g", v);
  else if (a >= 1000) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// "Nice" linear ticks (1, 2, 5 × 10^k steps) covering [lo, hi].
std::vector<double> linear_ticks(double lo, double hi) {
  const double span = hi - lo;
  const double raw = span / 6;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  return ticks;
}

}  // namespace

std::string render_svg(const LinePlot& plot) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  auto usable = [&](double x, double y) { return std::isfinite(x) && std::isfinite(y) && (!plot.log_x || x > 0); };
  for (const auto& s : plot.series)
    for (size_t i = 0; i < std::min(s.xs.size(), s.ys.size()); ++i)
      if (usable(s.xs[i], s.ys[i])) {
        x0 = std::min(x0, s.xs[i]), x1 = std::max(x1, s.xs[i]);
        y0 = std::min(y0, s.ys[i]), y1 = std::max(y1, s.ys[i]);
      }
  for (double r : plot.y_reference) y0 = std::min(y0, r), y1 = std::max(y1, r);
  if (!std::isfinite(x0)) x0 = plot.log_x ? 1 : 0, x1 = plot.log_x ? 10 : 1;
  if (!std::isfinite(y0)) y0 = 0, y1 = 1;
  y0 = std::min(y0, 0.0);  // rates and ratios read best from zero
  if (y1 <= y0) y1 = y0 + 1;
  y1 += (y1 - y0) * 0.05;
  if (plot.log_x) {  // widen to the nearest 1-2-5 steps around the data
    auto step_below = [](double x) {
      const double d = std::pow(10.0, std::floor(std::log10(x)));
      return x >= 5 * d ? 5 * d : x >= 2 * d ? 2 * d : d;
    };
    auto step_above = [](double x) {
      const double d = std::pow(10.0, std::floor(std::log10(x)));
      return x <= d ? d : x <= 2 * d ? 2 * d : x <= 5 * d ? 5 * d : 10 * d;
    };
    x0 = step_below(x0);
    x1 = std::max(step_above(x1), x0 * 2);
  } else if (x1 <= x0) {
    x1 = x0 + 1;
  }
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) {
    const double f = plot.log_x ? (std::log10(x) - std::log10(x0)) / (std::log10(x1) - std::log10(x0)) : (x - x0) / (x1 - x0);
    return kLeft + f * pw;
  };
  auto py = [&](double y) { return kTop + ph - (y - y0) / (y1 - y0) * ph; };

  std::string svg;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                kWidth, kHeight, kWidth, kHeight);
  svg += buf;
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">", kLeft + pw / 2);
  svg += buf + escape(plot.title) + "</text>\n";

  // Grid and ticks.
  for (double t : linear_ticks(y0, y1)) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                  kLeft, py(t), kLeft + pw, py(t), kLeft - 6, py(t) + 4, fmt(t).c_str());
    svg += buf;
  }
  std::vector<double> xticks;
  if (plot.log_x) {
    for (double d = std::pow(10.0, std::floor(std::log10(x0))); d <= x1 * 1.0001; d *= 10)
      for (double m : {1.0, 2.0, 5.0})
        if (d * m >= x0 * 0.9999 && d * m <= x1 * 1.0001) xticks.push_back(d * m);
  } else {
    xticks = linear_ticks(x0, x1);
  }
  for (double t : xticks) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                  px(t), kTop, px(t), kTop + ph, px(t), kTop + ph + 16, fmt(t).c_str());
    svg += buf;
  }
  std::snprintf(buf, sizeof buf,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", kLeft, kTop,
                pw, ph);
  svg += buf;
  for (double r : plot.y_reference) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" stroke-dasharray=\"2,3\"/>\n", kLeft,
                  py(r), kLeft + pw, py(r));
    svg += buf;
  }
  std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", kLeft + pw / 2, kHeight - 18);
  svg += buf + escape(plot.x_label) + (plot.log_x ? " (log scale)" : "") + "</text>\n";
  std::snprintf(buf, sizeof buf, "<text transform=\"translate(18,%.1f) rotate(-90)\" text-anchor=\"middle\">",
                kTop + ph / 2);
  svg += buf + escape(plot.y_label) + "</text>\n";

  // Series and legend.
  for (size_t k = 0; k < plot.series.size(); ++k) {
    const auto& s = plot.series[k];
    const char* color = kColors[k % (sizeof kColors / sizeof *kColors)];
    std::string points, markers;
    for (size_t i = 0; i < std::min(s.xs.size(), s.ys.size()); ++i) {
      if (!usable(s.xs[i], s.ys[i])) continue;
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", px(s.xs[i]), py(s.ys[i]));
      points += buf;
      // Dashed series get hollow markers, so two overlapping scatters stay distinguishable.
      if (s.dashed)
        std::snprintf(buf, sizeof buf, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"none\" stroke=\"%s\"/>",
                      px(s.xs[i]), py(s.ys[i]), color);
      else
        std::snprintf(buf, sizeof buf, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>", px(s.xs[i]),
                      py(s.ys[i]), color);
      markers += buf;
    }
    if (!s.points_only) {
      std::snprintf(buf, sizeof buf, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"", color,
                    s.dashed ? " stroke-dasharray=\"6,4\"" : "");
      svg += buf + points + "\"/>\n";
    }
    svg += markers + "\n";
    const double ly = kTop + 10 + 20 * k;
    if (s.points_only)  // the legend shows the series' marker
      std::snprintf(buf, sizeof buf, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" %s/>", kLeft + pw + 24, ly,
                    s.dashed ? ("fill=\"none\" stroke=\"" + std::string(color) + "\"").c_str()
                             : ("fill=\"" + std::string(color) + "\"").c_str());
    else
      std::snprintf(buf, sizeof buf,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>",
                    kLeft + pw + 12, ly, kLeft + pw + 36, ly, color, s.dashed ? " stroke-dasharray=\"6,4\"" : "");
    svg += buf;
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\">", kLeft + pw + 42, ly + 4);
    svg += buf + escape(s.name) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

void write_svg(const std::string& path, const LinePlot& plot) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error("cannot write plot '" + path + "'");
  f << render_svg(plot);
  if (!f) throw Error("cannot write plot '" + path + "'");
}

}  // namespace agentkv::tools
