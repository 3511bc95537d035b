#include "visualize/plan_plot.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "visualize/svg_writer.h"

namespace trainsim::visualize {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kWidth = 900, kHeight = 580, kLeft = 80, kRight = 30, kTop = 86, kBottom = 60;

// A "nice" step (1, 2 or 5 x 10^k) giving about `n` ticks over `span`.
double tick_step(double span, int n) {
  const double raw = span / n, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string text_el(double x, double y, const std::string& s, const char* anchor, double font, const char* extra = "") {
  std::string out = fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\" text-anchor=\"{}\" {}>", x, y, font, anchor, extra);
  append_escaped(out, s);
  return out + "</text>\n";
}

}  // namespace

std::vector<std::size_t> pareto_front(const std::vector<PlanPoint>& points) {
  std::vector<std::size_t> fit;
  for (std::size_t i = 0; i < points.size(); ++i)
    if (points[i].fits) fit.push_back(i);
  std::stable_sort(fit.begin(), fit.end(), [&](std::size_t a, std::size_t b) {
    if (points[a].peak_memory_bytes != points[b].peak_memory_bytes) return points[a].peak_memory_bytes < points[b].peak_memory_bytes;
    return points[a].tokens_per_s_per_gpu > points[b].tokens_per_s_per_gpu;
  });
  std::vector<std::size_t> front;
  double best = -1;
  for (std::size_t i : fit)
    if (points[i].tokens_per_s_per_gpu > best) front.push_back(i), best = points[i].tokens_per_s_per_gpu;
  return front;
}

std::string plan_plot_svg(const std::vector<PlanPoint>& points, double capacity_bytes, double usable_bytes,
                          const PlanPlotText& text) {
  // The memory axis reaches twice the device's capacity: candidates far beyond it are drawn at its edge.
  const double device = std::max(capacity_bytes, usable_bytes);
  double xmax = device, ymax = 0;
  int beyond = 0;
  for (const PlanPoint& p : points) xmax = std::max(xmax, p.peak_memory_bytes), ymax = std::max(ymax, p.tokens_per_s_per_gpu);
  if (device > 0 && xmax > 2 * device) {
    xmax = 2 * device;
    for (const PlanPoint& p : points) beyond += p.peak_memory_bytes > xmax;
  }
  xmax = xmax > 0 ? xmax / kGiB * 1.05 : 1;
  ymax = ymax > 0 ? ymax * 1.08 : 1;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto X = [&](double bytes) { return kLeft + std::min(bytes / kGiB, xmax) / xmax * pw; };
  auto Y = [&](double tps) { return kTop + ph - tps / ymax * ph; };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"DejaVu Sans, sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kWidth, kHeight, kWidth, kHeight);
  s += text_el(kLeft, 24, text.title, "start", 15, "font-weight=\"bold\"");
  s += text_el(kLeft, 44, text.subtitle, "start", 12, "fill=\"#444\"");
  if (!text.note.empty()) s += text_el(kLeft, 62, text.note, "start", 12, "fill=\"#444\"");
  if (beyond > 0)
    s += text_el(kLeft + pw, kTop - 8, fmt::format("{} candidates beyond {:.0f} GiB (twice the capacity) drawn at the right edge", beyond, 2 * device / kGiB),
                 "end", 11, "fill=\"#777\"");
  // Axes, grid and ticks.
  const double xs = tick_step(xmax, 8), ys = tick_step(ymax, 6);
  for (double v = 0; v <= xmax + 1e-9; v += xs) {
    const double x = kLeft + v / xmax * pw;
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#eee\"/>\n", x, kTop, x, kTop + ph);
    s += text_el(x, kTop + ph + 18, fmt::format("{:g}", v), "middle", 11);
  }
  for (double v = 0; v <= ymax + 1e-9; v += ys) {
    const double y = kTop + ph - v / ymax * ph;
    s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#eee\"/>\n", kLeft, y, kLeft + pw, y);
    s += text_el(kLeft - 6, y + 4, fmt::format("{:g}", v), "end", 11);
  }
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", kLeft, kTop, pw, ph);
  s += text_el(kLeft + pw / 2, kHeight - 16, "peak memory of the heaviest rank (GiB)", "middle", 12);
  s += text_el(18, kTop + ph / 2, "tokens/s per GPU", "middle", 12,
               fmt::format("transform=\"rotate(-90 18 {:.1f})\"", kTop + ph / 2).c_str());
  // The device's memory.
  if (capacity_bytes > 0) {
    s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#c0392b\" stroke-width=\"1.5\"/>\n",
                     X(capacity_bytes), kTop, kTop + ph);
    s += text_el(X(capacity_bytes) + 4, kTop + 14, "capacity", "start", 11, "fill=\"#c0392b\"");
  }
  if (usable_bytes > 0 && usable_bytes != capacity_bytes) {
    s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#c0392b\" stroke-dasharray=\"5 4\"/>\n",
                     X(usable_bytes), kTop, kTop + ph);
    s += text_el(X(usable_bytes) - 4, kTop + 14, "usable (capacity less the reserve)", "end", 11, "fill=\"#c0392b\"");
  }
  // Points: out of memory first (under), then those that fit.
  for (int pass = 0; pass < 2; ++pass)
    for (const PlanPoint& p : points) {
      if (p.fits != (pass == 1)) continue;
      s += p.fits ? fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.6\" fill=\"#2e86c1\" fill-opacity=\"0.55\"/>\n",
                                X(p.peak_memory_bytes), Y(p.tokens_per_s_per_gpu))
                  : fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.6\" fill=\"none\" stroke=\"#999\"/>\n",
                                X(p.peak_memory_bytes), Y(p.tokens_per_s_per_gpu));
    }
  // The Pareto front.
  const std::vector<std::size_t> front = pareto_front(points);
  if (!front.empty()) {
    std::string path;
    for (std::size_t k = 0; k < front.size(); ++k) {
      const PlanPoint& p = points[front[k]];
      path += fmt::format("{}{:.1f},{:.1f}", k == 0 ? "M" : " L", X(p.peak_memory_bytes), Y(p.tokens_per_s_per_gpu));
    }
    s += "<path d=\"" + path + "\" fill=\"none\" stroke=\"#e67e22\" stroke-width=\"2\"/>\n";
    for (std::size_t i : front)
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"#e67e22\"/>\n", X(points[i].peak_memory_bytes),
                       Y(points[i].tokens_per_s_per_gpu));
  }
  // The top rows, labelled to the right of the capacity line in rank order, a leader line to each point.
  std::vector<std::size_t> labelled;
  for (std::size_t i = 0; i < points.size(); ++i)
    if (points[i].label > 0) labelled.push_back(i);
  std::sort(labelled.begin(), labelled.end(), [&](std::size_t a, std::size_t b) { return points[a].label < points[b].label; });
  const double label_x = std::min(kLeft + pw - 40, std::max(X(device), X(0)) + 60);
  double label_y = kTop + 52;
  for (std::size_t i : labelled) {
    const PlanPoint& p = points[i];
    const double px = X(p.peak_memory_bytes), py = Y(p.tokens_per_s_per_gpu);
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"5\" fill=\"none\" stroke=\"#111\" stroke-width=\"1.2\"/>\n", px, py);
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#111\" stroke-width=\"0.6\"/>\n", px + 5,
                     py, label_x - 3, label_y - 4);
    s += text_el(label_x, label_y, fmt::format("#{}", p.label), "start", 11, "font-weight=\"bold\"");
    label_y += 14;
  }
  // Legend.
  const double lx = kLeft + pw - 150, ly = kTop + ph - 70;
  s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"#2e86c1\"/>\n", lx, ly);
  s += text_el(lx + 8, ly + 4, "fits", "start", 11);
  s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"none\" stroke=\"#999\"/>\n", lx, ly + 16);
  s += text_el(lx + 8, ly + 20, "out of memory", "start", 11);
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e67e22\" stroke-width=\"2\"/>\n", lx - 4, ly + 32, lx + 4, ly + 32);
  s += text_el(lx + 8, ly + 36, "Pareto front", "start", 11);
  s += text_el(lx + 8, ly + 52, "#N: rank in the table", "start", 11);
  return s + "</svg>\n";
}

}  // namespace trainsim::visualize
