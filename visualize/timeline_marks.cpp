#include "visualize/timeline_marks.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "sim/world.h"
#include "visualize/palette.h"
#include "visualize/timeline_units.h"

namespace trainsim::visualize {

std::vector<std::string> failure_lines(const std::string& error, std::size_t max_lines) {
  std::vector<std::string> lines{"RUN FAILED - this timeline stops at the error:"};
  std::vector<std::string> all;
  std::size_t at = 0;
  while (at <= error.size()) {
    std::size_t nl = error.find('\n', at);
    std::string line = error.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (line.size() > 220) line = line.substr(0, 217) + "...";
    all.push_back(line);
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  for (std::size_t i = 0; i < all.size() && i < max_lines; ++i) lines.push_back(all[i]);
  if (all.size() > max_lines) lines.push_back(fmt::format("... {} more lines", all.size() - max_lines));
  return lines;
}

double failure_banner_height(std::size_t lines) { return lines == 0 ? 0 : 10 + 15.0 * static_cast<double>(lines); }

void draw_failure_banner(Svg& svg, const std::vector<std::string>& lines, double top, double width) {
  if (lines.empty()) return;
  svg.put("<g class=\"failure\">\n");
  svg.put("<rect x=\"8\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#fde8e8\" stroke=\"{}\" "
          "stroke-width=\"1.5\"/>\n",
          top, width - 16, failure_banner_height(lines.size()) - 4, kPeakColour);
  for (std::size_t i = 0; i < lines.size(); ++i)
    svg.text(16, top + 16 + 15.0 * static_cast<double>(i), lines[i],
             i == 0 ? fmt::format("font-size=\"13\" font-weight=\"bold\" fill=\"{}\"", kPeakColour)
                    : std::string("font-size=\"11.5\" fill=\"#5a1010\" xml:space=\"preserve\""));
  svg.put("</g>\n");
}

void draw_blocked_mark(Svg& svg, const BlockedMark& mark, double x, double x_end, double top, double height) {
  svg.put("<g class=\"blocked\"><title>");
  append_escaped(svg.s, fmt::format("rank {} blocked from t={} until the run stopped: {}", mark.rank,
                                    format_time(mark.since), mark.what));
  svg.put("</title>\n");
  svg.put("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\" fill-opacity=\"0.15\" "
          "stroke=\"{}\" stroke-dasharray=\"4,3\" stroke-width=\"1\"/>\n",
          x, top, std::max(x_end - x, 2.0), height, kPeakColour, kPeakColour);
  svg.put("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" stroke-width=\"2.5\"/>\n", x,
          top - 1, top + height + 1, kPeakColour);
  // The word inside the band when it fits (nothing ran there after x, so it covers no op's label).
  const double font = std::min(10.0, height - 2);
  if (font >= 6 && x + 4 + text_width("blocked", font) * 1.1 <= x_end)
    svg.text(x + 4, top + height / 2 + font * 0.38, "blocked",
             fmt::format("font-size=\"{:.0f}\" font-weight=\"bold\" fill=\"{}\"", font, kPeakColour));
  svg.put("</g>\n");
}

PeakSpan peak_held_longest(const Trace& trace, const MemoryPeak& peak) {
  PeakSpan best{peak.time, peak.time};
  if (peak.rank < 0 || peak.rank >= static_cast<int>(trace.ranks.size())) return best;
  std::vector<std::pair<Time, double>> samples;
  Time end = 0;
  for (const auto& r : trace.ranks[peak.rank]) {
    if (!is_timed(r.op.kind)) continue;
    samples.emplace_back(r.start, r.memory);
    end = std::max(end, r.end);
  }
  std::stable_sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  bool found = false;
  for (std::size_t k = 0; k < samples.size(); ++k) {
    if (samples[k].second != peak.memory) continue;
    Time until = k + 1 < samples.size() ? samples[k + 1].first : end;
    if (!found || until - samples[k].first > best.end - best.start) best = {samples[k].first, until};
    found = true;
  }
  return best;
}

std::string peak_tooltip(const MemoryPeak& peak, const PeakSpan& span, const PeakExplanation* why,
                         const std::string& unit, bool real) {
  auto t = [&](Time x) { return time_text(x, real); };
  std::string s = fmt::format("peak memory {} on rank {}, first at t={}",
                              real ? memory_text(peak.memory, unit) : format_memory(peak.memory) + " " + unit,
                              peak.rank, t(peak.time));
  if (span.start != peak.time || span.end != peak.time)
    s += fmt::format("; marked where it is held longest, t={} to {}", t(span.start), t(span.end));
  if (why) {
    s += fmt::format("\nat t={}, as {} started, rank {} held:", t(peak.time), why->op, peak.rank);
    for (const auto& [name, size] : why->resident)
      s += fmt::format("\n  {} {}", name, real ? memory_text(size, unit) : format_memory(size));
  }
  return s;
}

std::string peak_caption(const MemoryPeak& peak, const PeakExplanation& why, std::size_t max_chars) {
  std::string s = fmt::format("Peak {} on rank {} at t={}: as {} started, it held ", format_memory(peak.memory),
                              peak.rank, format_time(peak.time), why.op);
  for (std::size_t i = 0; i < why.resident.size(); ++i) {
    std::string item = fmt::format("{}{} ({})", i ? ", " : "", why.resident[i].first, format_memory(why.resident[i].second));
    if (s.size() + item.size() > max_chars) {
      s += fmt::format(", ... and {} more (tooltip of the peak marker)", why.resident.size() - i);
      return s;
    }
    s += item;
  }
  return why.resident.empty() ? s + "nothing" : s;
}

void heatmap_strip(Svg& svg, const std::vector<std::pair<double, double>>& steps, double x_end, double top, double h,
                   double scale) {
  auto level = [&](double v) { return std::clamp(static_cast<int>(std::ceil(v / scale * 10 - 1e-9)), 0, 10); };
  // One <path> per opacity level: a strip is many short spans, and this keeps big timelines small.
  std::vector<std::string> paths(10);
  std::size_t i = 0;
  while (i < steps.size()) {
    int lv = level(steps[i].second);
    std::size_t j = i + 1;
    while (j < steps.size() && level(steps[j].second) == lv) ++j;
    double xa = steps[i].first, xb = j < steps.size() ? steps[j].first : x_end;
    if (lv > 0 && xb > xa)
      fmt::format_to(std::back_inserter(paths[lv - 1]), "M{:.1f},{:.1f}H{:.1f}v{:.1f}H{:.1f}z", xa, top, xb, h, xa);
    i = j;
  }
  svg.put("<g class=\"mem-heat\" fill=\"{}\" stroke=\"none\">", kMemoryStroke);
  for (int lv = 1; lv <= 10; ++lv)
    if (!paths[lv - 1].empty()) svg.put("<path d=\"{}\" fill-opacity=\"{:.1f}\"/>", paths[lv - 1], lv / 10.0);
  svg.put("</g>\n");
}

}  // namespace trainsim::visualize
