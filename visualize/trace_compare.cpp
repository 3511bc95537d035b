#include "visualize/trace_compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <tuple>

#include "visualize/svg_writer.h"
#include "visualize/timeline_svg.h"
#include "visualize/timeline_units.h"

namespace trainsim::visualize {

namespace {

double seconds(Time t) { return static_cast<double>(t) * 1e-9; }

// The k-th op with this description on this rank: (rank, description, k) -> duration in seconds, and the
// program-order position of each key.
struct Durations {
  std::map<std::tuple<int, std::string, int>, double> by_key;
  std::vector<std::tuple<int, std::string, int>> order;
};

Durations durations(const Trace& t) {
  Durations d;
  for (std::size_t r = 0; r < t.ranks.size(); ++r) {
    std::map<std::string, int> seen;
    for (const OpRun& run : t.ranks[r]) {
      const std::string name = run.op.describe() + run.op.where_suffix();
      const auto key = std::make_tuple(static_cast<int>(r), name, seen[name]++);
      d.by_key[key] = seconds(run.end - run.start);
      d.order.push_back(key);
    }
  }
  return d;
}

// The timeline's SVG without its XML prolog, placed at (0, y) inside another SVG; its height in `height`.
std::string nested(std::string svg, double y, double& height, double& width) {
  if (svg.rfind("<?xml", 0) == 0) svg.erase(0, svg.find('\n') + 1);
  std::smatch m;
  height = width = 0;
  if (std::regex_search(svg, m, std::regex("width=\"([0-9.]+)\" height=\"([0-9.]+)\"")))
    width = std::stod(m[1].str()), height = std::stod(m[2].str());
  svg.replace(0, 4, fmt::format("<svg x=\"0\" y=\"{:.0f}\"", y));
  return svg;
}

std::string duration_text(double s) {
  if (std::abs(s) >= 1) return fmt::format("{:.3f} s", s);
  return fmt::format("{:.3f} ms", s * 1e3);
}

}  // namespace

std::vector<OpDifference> largest_op_differences(const Trace& measured, const Trace& simulated, std::size_t count) {
  const Durations m = durations(measured), s = durations(simulated);
  std::vector<OpDifference> out;
  for (const auto& key : m.order) {
    auto it = s.by_key.find(key);
    if (it == s.by_key.end()) continue;
    out.push_back(OpDifference{std::get<0>(key), std::get<1>(key), m.by_key.at(key), it->second});
  }
  std::stable_sort(out.begin(), out.end(), [](const OpDifference& a, const OpDifference& b) {
    return std::abs(a.difference_s()) > std::abs(b.difference_s());
  });
  if (out.size() > count) out.resize(count);
  return out;
}

std::string comparison_svg(const Trace& measured, const Trace& simulated, const ComparisonOptions& o) {
  const double tm = seconds(measured.makespan()), ts = seconds(simulated.makespan());
  const double longest = std::max({tm, ts, 1e-9});
  auto timeline = [&](const Trace& t, const std::string& title, const std::vector<double>& peaks, const CostModel* cost) {
    TimelineOptions opt;
    opt.title = title;
    opt.allocator_peak = peaks;
    opt.cost = cost;
    opt.px_per_second = o.time_width / longest;
    opt.min_time_width = 0;
    opt.max_time_width = o.time_width;
    return timeline_svg(t, opt);
  };
  const std::vector<OpDifference> diffs = largest_op_differences(measured, simulated, o.differences);

  double y = 70, h1 = 0, w1 = 0, h2 = 0, w2 = 0;
  const std::string first = nested(timeline(measured, o.measured_title, o.allocator_peak, nullptr), y, h1, w1);
  y += h1 + 10;
  const std::string second = nested(timeline(simulated, o.simulated_title, {}, o.simulated_cost), y, h2, w2);
  y += h2 + 20;
  const double table_top = y, row = 18;
  const double height = table_top + 40 + row * static_cast<double>(diffs.size()) + 20;
  const double width = std::max({w1, w2, 900.0});

  Svg svg;
  svg.put("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  svg.put("<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 "
          "{:.0f} {:.0f}\" font-family=\"sans-serif\" font-size=\"12\">\n",
          width, height, width, height);
  svg.put("<rect x=\"0\" y=\"0\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"#ffffff\"/>\n", width, height);
  svg.text(16, 28, o.title, "font-size=\"18\" font-weight=\"bold\"");
  svg.text(16, 52,
           fmt::format("step time: measured {}, simulated {} (measured / simulated = {:.2f}); both timelines on one "
                       "time scale",
                       time_text(measured.makespan(), true), time_text(simulated.makespan(), true), ts > 0 ? tm / ts : 0.0),
           "font-size=\"13\"");
  svg.s += first;
  svg.s += second;
  svg.text(16, table_top + 14,
           fmt::format("the {} ops whose durations differ most (measured − simulated)", diffs.size()),
           "font-size=\"14\" font-weight=\"bold\"");
  const double cx[] = {16, 80, 640, 760, 880};
  double ty = table_top + 36;
  int i = 0;
  for (const char* head : {"rank", "op", "measured", "simulated", "difference"})
    svg.text(cx[i++], ty, head, "font-weight=\"bold\"");
  for (const OpDifference& d : diffs) {
    ty += row;
    svg.text(cx[0], ty, fmt::format("{}", d.rank));
    svg.text(cx[1], ty, d.op);
    svg.text(cx[2], ty, duration_text(d.measured_s));
    svg.text(cx[3], ty, duration_text(d.simulated_s));
    svg.text(cx[4], ty, (d.difference_s() >= 0 ? "+" : "") + duration_text(d.difference_s()),
             d.difference_s() >= 0 ? "fill=\"#b22222\"" : "fill=\"#1f5fa8\"");
  }
  svg.s += "</svg>\n";
  return std::move(svg.s);
}

}  // namespace trainsim::visualize
