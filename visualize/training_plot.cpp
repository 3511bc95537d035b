#include "visualize/training_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "visualize/svg_writer.h"

namespace trainsim::visualize {

namespace {

constexpr double kWidth = 900, kLeft = 90, kRight = 30, kPanelHeight = 260, kLrHeight = 150, kGap = 70;
constexpr const char* kTrain = "#1f77b4", *kVal = "#d62728", *kLr = "#2ca02c";

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
};

// A tick label: few digits, no trailing zeros; scientific for very small or large values.
std::string tick_text(double v, double step) {
  if (v == 0) return "0";
  const double a = std::abs(v);
  if (a < 1e-3 || a >= 1e6) return fmt::format("{:.2g}", v);
  const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  return fmt::format("{:.{}f}", v, decimals);
}

struct Panel {
  double top, height;
  Range x, y;
  std::vector<double> xticks, yticks;
  double px(double v) const { return kLeft + (v - x.lo) / (x.hi - x.lo) * (kWidth - kLeft - kRight); }
  double py(double v) const { return top + height - (v - y.lo) / (y.hi - y.lo) * height; }
};

Panel make_panel(double top, double height, Range x, Range y) {
  Panel p{top, height, x, y, {}, {}};
  if (p.x.empty()) p.x = Range{1, 2};
  if (p.x.hi <= p.x.lo) p.x.hi = p.x.lo + 1;
  if (p.y.empty()) p.y = Range{0, 1};
  if (p.y.hi <= p.y.lo) {
    const double pad = std::max(std::abs(p.y.lo) * 0.05, 1e-12);
    p.y.lo -= pad, p.y.hi += pad;
  }
  p.xticks = nice_ticks(p.x.lo, p.x.hi, 8);
  if (p.xticks.size() > 1 && p.xticks[1] - p.xticks[0] < 1) {  // steps are whole: one tick per step at most
    p.xticks.clear();
    for (double t = std::ceil(p.x.lo); t <= p.x.hi; ++t) p.xticks.push_back(t);
  }
  p.yticks = nice_ticks(p.y.lo, p.y.hi, 5);
  // The y range grows to the ticks around it, so the curve sits between labelled lines.
  const double ys = p.yticks.size() > 1 ? p.yticks[1] - p.yticks[0] : 1;
  p.y.lo = std::min(p.y.lo, std::floor(p.y.lo / ys) * ys);
  p.y.hi = std::max(p.y.hi, std::ceil(p.y.hi / ys) * ys);
  p.yticks = nice_ticks(p.y.lo, p.y.hi, 5);
  return p;
}

void draw_axes(Svg& svg, const Panel& p, const std::string& ylabel, const std::string& xlabel) {
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = p.top, y1 = p.top + p.height;
  const double ys = p.yticks.size() > 1 ? p.yticks[1] - p.yticks[0] : 1;
  const double xs = p.xticks.size() > 1 ? p.xticks[1] - p.xticks[0] : 1;
  for (double t : p.yticks) {
    if (t < p.y.lo - 1e-12 || t > p.y.hi + 1e-12) continue;
    const double y = p.py(t);
    svg.put("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>\n", x0, y, x1, y);
    svg.text(x0 - 8, y + 4, tick_text(t, ys), "text-anchor=\"end\" font-size=\"12\"");
  }
  for (double t : p.xticks) {
    if (t < p.x.lo - 1e-9 || t > p.x.hi + 1e-9) continue;
    const double x = p.px(t);
    svg.put("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#f0f0f0\"/>\n", x, y0, x, y1);
    svg.put("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#333\"/>\n", x, y1, x, y1 + 5);
    svg.text(x, y1 + 19, tick_text(t, xs), "text-anchor=\"middle\" font-size=\"12\"");
  }
  svg.put("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#333\"/>\n", x0, y0,
          x1 - x0, y1 - y0);
  svg.text(x0 + (x1 - x0) / 2, y1 + 38, xlabel, "text-anchor=\"middle\" font-size=\"13\"");
  const double cy = y0 + (y1 - y0) / 2;
  svg.put("<text x=\"22\" y=\"{:.1f}\" transform=\"rotate(-90 22 {:.1f})\" text-anchor=\"middle\" font-size=\"13\">", cy,
          cy);
  append_escaped(svg.s, ylabel);
  svg.s += "</text>\n";
}

void draw_curve(Svg& svg, const Panel& p, const std::vector<CurvePoint>& pts, const char* colour, bool markers) {
  std::string path;
  for (const CurvePoint& c : pts) {
    if (!std::isfinite(c.value) || !std::isfinite(c.step)) continue;
    path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L", p.px(c.step), p.py(c.value));
  }
  if (!path.empty())
    svg.put("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" stroke-linejoin=\"round\"/>\n", path, colour);
  if (markers)
    for (const CurvePoint& c : pts)
      if (std::isfinite(c.value))
        svg.put("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"><title>step {}: {:.4f}</title></circle>\n",
                p.px(c.step), p.py(c.value), colour, c.step, c.value);
}

void legend_entry(Svg& svg, double x, double y, const char* colour, const std::string& label, bool marker) {
  svg.put("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"2\"/>\n", x, y,
          x + 24, y, colour);
  if (marker) svg.put("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"/>\n", x + 12, y, colour);
  svg.text(x + 30, y + 4, label, "font-size=\"12\"");
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int count) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi) || count < 1) return {lo};
  const double raw = (hi - lo) / count;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw * (1 - 1e-9)) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

std::string training_plot_svg(const TrainingCurves& c) {
  Range steps, loss, lr;
  for (const auto* curve : {&c.train_loss, &c.val_loss, &c.learning_rate})
    for (const CurvePoint& p : *curve) steps.add(p.step);
  for (const auto* curve : {&c.train_loss, &c.val_loss})
    for (const CurvePoint& p : *curve) loss.add(p.value);
  for (const CurvePoint& p : c.learning_rate) lr.add(p.value);
  if (!steps.empty() && steps.lo > 0) steps.lo = std::min(steps.lo, 1.0);
  if (!lr.empty()) lr.lo = std::min(lr.lo, 0.0);

  // The note, one line per "; "-separated part.
  std::vector<std::string> notes;
  for (std::size_t at = 0; !c.note.empty() && at <= c.note.size();) {
    const std::size_t end = std::min(c.note.find("; ", at), c.note.size());
    notes.push_back(c.note.substr(at, end - at));
    at = end + 2;
  }
  const double head = 40 + 17 * static_cast<double>(notes.size());
  const Panel top = make_panel(head + 34, kPanelHeight, steps, loss);
  const Panel bottom = make_panel(top.top + top.height + kGap + 24, kLrHeight, steps, lr);
  const double height = bottom.top + bottom.height + 60;

  Svg svg;
  svg.put("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 {:.0f} {:.0f}\" "
          "font-family=\"DejaVu Sans, Arial, sans-serif\">\n",
          kWidth, height, kWidth, height);
  svg.put("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  svg.text(kLeft, 28, c.title, "font-size=\"16\" font-weight=\"bold\"");
  for (std::size_t i = 0; i < notes.size(); ++i)
    svg.text(kLeft, 50 + 17 * static_cast<double>(i), notes[i], "font-size=\"12\" fill=\"#555\"");

  // Legends sit above their panels, never over a curve.
  draw_axes(svg, top, "loss (cross-entropy, nats per token)", "step");
  draw_curve(svg, top, c.train_loss, kTrain, false);
  draw_curve(svg, top, c.val_loss, kVal, true);
  legend_entry(svg, kLeft, top.top - 12, kTrain, "training loss (mean over the step's tokens)", false);
  if (!c.val_loss.empty())
    legend_entry(svg, kLeft + 330, top.top - 12, kVal, "validation loss (held-out split, fixed sequences)", true);

  draw_axes(svg, bottom, "learning rate", "step");
  draw_curve(svg, bottom, c.learning_rate, kLr, false);
  legend_entry(svg, kLeft, bottom.top - 12, kLr, "AdamW learning rate (warmup, cosine decay)", false);
  svg.s += "</svg>\n";
  return std::move(svg.s);
}

}  // namespace trainsim::visualize
