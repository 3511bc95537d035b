// Timeline SVG (DESIGN §4). Layout, top to bottom: heading, summary lines, legend, time axis, one row per
// rank (or per bucket of ranks), the memory lanes, the time axis again.
//
// Everything is written in one pass into a string with fmt and fixed precision ("{:.1f}" for coordinates),
// iterating only over vectors in index order, so the same input gives the same bytes.
//
// Many ranks (more than options.max_detailed_ranks): ranks are bucketed into rows of k consecutive ranks
// ("ranks a-b", at most max_detailed_ranks rows). Each row is cut into time bins of summary_bin_px pixels; a
// bin is a stacked column of the shares of the row's rank-time spent in each op category (forward, backward,
// update, collective, TP collective, pass; tenths of the row's height), in the detailed view's colours. Adjacent bins with
// equal columns are one rectangle per segment. The row's memory lane plots, per bin, the highest memory of any
// of its ranks. The summary lines of the SVG say so. Failure banner, blocked marks, the peak's placement and
// explanation, and heatmap strips are in timeline_marks.h; exposed-communication strips in timeline_exposed.h.
#include "visualize/timeline_svg.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sim/world.h"
#include "sim/tp_ops.h"
#include "visualize/palette.h"
#include "visualize/svg_writer.h"
#include "visualize/timeline_exposed.h"
#include "visualize/timeline_marks.h"
#include "visualize/timeline_summary.h"
#include "visualize/timeline_tp_inside.h"
#include "visualize/timeline_units.h"

namespace trainsim::visualize {

namespace {

// ---------------------------------------------------------------- axis

/// Smallest of 1, 2, 5 x 10^k that is at least `raw`.
double nice_step(double raw) {
  if (!(raw > 0) || !std::isfinite(raw)) return 1;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw * (1 - 1e-9)) return m * p;
  return 10 * p;
}

/// Tick label with just enough decimals for `step`.
std::string tick_label(double v, double step) {
  int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  return fmt::format("{:.{}f}", v, std::clamp(decimals, 0, 9));
}

// ---------------------------------------------------------------- op categories and looks

struct Look {
  const std::string* fill = nullptr;
  bool dashed = false;  // dashed outline (backward-weight)
};

/// Fill colours per layer, computed when a layer is first drawn: a schedule may declare a million layers and
/// use a few.
class Colours {
 public:
  explicit Colours(int layers) : layers_(std::max(layers, 1)) {}
  int layers() const { return layers_; }
  const std::string& forward(int l) const { return of(l).fwd; }
  const std::string& backward(int l) const { return of(l).bwd; }

  Look look(const Op& op) const {
    switch (op.kind) {
      case OpKind::Forward: return {&of(op.layer).fwd};
      case OpKind::Backward: return {&of(op.layer).bwd};
      case OpKind::BackwardInput: return {&of(op.layer).bi};
      case OpKind::BackwardWeight: return {&of(op.layer).bw, true};
      case OpKind::Update: return {&update_};
      case OpKind::Send:
      case OpKind::Recv: return {&pass_};
      case OpKind::Loss: return {&loss_};
      case OpKind::AllGather: return {is_tp_collective(op) ? &tp_ : &ag_};
      case OpKind::ReduceScatter: return {is_tp_collective(op) ? &tp_ : &rs_};
      case OpKind::AllReduce: return {is_tp_collective(op) ? &tp_ : &ar_};
      case OpKind::Broadcast: return {&bc_};
      case OpKind::Reduce: return {&rd_};
      case OpKind::AllToAll: return {&a2a_};
      default: return {&nolayer_};
    }
  }

 private:
  struct Set {
    std::string fwd, bwd, bi, bw;
  };
  // (std::map: the strings handed out stay where they are as layers are added.)
  const Set& of(int layer) const {
    int l = std::clamp(layer, 0, layers_ - 1);
    auto it = cache_.find(l);
    if (it == cache_.end())
      it = cache_.emplace(l, Set{layer_colour(l, layers_), backward_colour(l, layers_), backward_input_colour(l, layers_),
                                 backward_weight_colour(l, layers_)})
               .first;
    return it->second;
  }
  int layers_;
  mutable std::map<int, Set> cache_;
  std::string update_ = kUpdateColour, pass_ = kPassColour, loss_ = kLossColour, nolayer_ = kNoLayerColour,
              ag_ = kAllGatherColour, rs_ = kReduceScatterColour, ar_ = kAllReduceColour, bc_ = kBroadcastColour,
              rd_ = kReduceColour, tp_ = kTpCollectiveColour, a2a_ = kAllToAllColour;
};

/// The label drawn inside an op's box: the longest form that fits `width` px at `font` px, or "". Every form
/// starts with the layer ("L2"), then the batch set for compute ("L2 0 1 2 3", "L2 0-3", with "I"/"W" for
/// split backwards), the kind for the others ("L2 U", "L2 AR"); the legend says so.
std::string box_label(const Op& op, double width, double font) {
  if (width < font * 0.62 + 3) return {};
  auto fits = [&](const std::string& s) { return text_width(s, font) + 2 <= width; };
  const std::string layer = op.layer >= 0 && op.kind != OpKind::Loss ? fmt::format("L{}", op.layer) : std::string();
  auto with_layer = [&](const std::string& rest) {
    return layer.empty() ? rest : rest.empty() ? layer : layer + " " + rest;
  };
  std::string s;
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward:
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight: {
      std::string suffix = op.kind == OpKind::BackwardInput ? "I" : op.kind == OpKind::BackwardWeight ? "W" : "";
      std::string sep = suffix.empty() ? "" : " ";
      if (!op.batches.empty()) {
        if (op.batches.size() <= 64 && fits(s = with_layer(op.batches.spaced() + sep + suffix))) return s;
        if (fits(s = with_layer(op.batches.str() + sep + suffix))) return s;
        if (fits(s = op.batches.str() + sep + suffix)) return s;  // narrow: the batches before the layer
      }
      if (fits(s = with_layer(suffix))) return s;
      return fits(suffix) ? suffix : std::string();
    }
    case OpKind::Update: s = "U"; break;
    case OpKind::AllGather: s = "AG"; break;
    case OpKind::ReduceScatter: s = "RS"; break;
    case OpKind::AllReduce: s = "AR"; break;
    case OpKind::Broadcast: s = "BC"; break;
    case OpKind::Reduce: s = "RD"; break;
    case OpKind::AllToAll: s = "A2A"; break;
    case OpKind::Barrier: s = "B"; break;
    case OpKind::Send: s = fmt::format("\u2192{}", op.peer); break;
    case OpKind::Recv: s = op.peer < 0 ? std::string("\u2190*") : fmt::format("\u2190{}", op.peer); break;
    default: return {};
  }
  if (op.kind != OpKind::Send && op.kind != OpKind::Recv && fits(with_layer(s))) return with_layer(s);
  return fits(s) ? s : std::string();
}

void open_svg(Svg& svg, double width, double height, const std::string& title) {
  svg.put("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  svg.put(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\" font-size=\"12\">\n",
      width, height);
  svg.put("<rect x=\"0\" y=\"0\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"#ffffff\"/>\n", width, height);
  svg.text(16, 28, title, "font-size=\"18\" font-weight=\"bold\"");
}

std::string empty_svg(const Trace& trace, const TimelineOptions& opt) {
  std::string title = (opt.title.empty() ? std::string("timeline") : opt.title) + (opt.error.empty() ? "" : " - FAILED");
  std::string detail = trace.ranks.empty() ? "no ops: the trace has no ranks"
                                           : fmt::format("no ops: none of the {} ranks ran a timed op", trace.ranks.size());
  std::vector<std::string> banner = opt.error.empty() ? std::vector<std::string>() : failure_lines(opt.error);
  double width = std::max({480.0, text_width(title, 19.8) + 32, text_width(detail, 13) + 32});
  for (const auto& l : banner) width = std::max(width, text_width(l, 12.5) + 40);
  width = std::ceil(width);
  const double banner_h = failure_banner_height(banner.size());
  Svg svg;
  open_svg(svg, width, 90 + banner_h, title);
  draw_failure_banner(svg, banner, 40, width);
  svg.text(16, 60 + banner_h, detail, "font-size=\"13\" fill=\"#555555\"");
  svg.put("</svg>\n");
  return std::move(svg.s);
}

// ---------------------------------------------------------------- legend

struct LegendItem {
  // Band: a box in fills[0] with the TP-inside band at its bottom right (timeline_tp_inside.h).
  enum Style { Boxes, Bar, Area, PeakLine, DashedLine, Strip, Text, Band } style = Boxes;
  std::vector<std::string> fills;
  double opacity = 1;  // < 1: the boxes fade from `opacity` to 1
  bool dashed = false;
  std::string label;
};

double legend_swatch_width(const LegendItem& it) {
  if (it.style == LegendItem::Boxes) return 12.0 * static_cast<double>(std::max<std::size_t>(it.fills.size(), 1));
  if (it.style == LegendItem::Bar) return 4;
  if (it.style == LegendItem::Text) return 0;
  if (it.style == LegendItem::Band) return 24;
  return 18;
}

/// Lays the items out in rows from (x, top), wrapping at `right`. Returns the number of rows. Draws when svg.
int legend(Svg* svg, const std::vector<LegendItem>& items, double x0, double top, double right) {
  double x = x0;
  int row = 0;
  for (const auto& it : items) {
    double w = legend_swatch_width(it) + 5 + text_width(it.label, 11);
    if (x > x0 && x + w > right) {
      x = x0;
      ++row;
    }
    double y = top + row * 18;
    if (svg) {
      switch (it.style) {
        case LegendItem::Boxes:
          for (std::size_t i = 0; i < it.fills.size(); ++i)
            svg->put("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"{}{}/>\n", x + 12.0 * i, y,
                     it.fills[i],
                     it.opacity < 1 ? fmt::format(" fill-opacity=\"{:.1f}\"",
                                                  it.fills.size() == 1 ? it.opacity
                                                                       : it.opacity + (1 - it.opacity) * static_cast<double>(i) /
                                                                                          static_cast<double>(it.fills.size() - 1))
                                    : std::string(),
                     it.dashed ? " stroke=\"#000000\" stroke-opacity=\"0.6\" stroke-dasharray=\"2,1\"" : "");
          break;
        case LegendItem::Bar:
          svg->put("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"3\" height=\"12\" fill=\"{}\"/>\n", x, y, kLossColour);
          break;
        case LegendItem::Area:
          svg->put("<path d=\"M{0:.1f},{1:.1f}V{2:.1f}H{3:.1f}V{4:.1f}H{5:.1f}V{1:.1f}Z\" fill=\"{6}\" fill-opacity=\"0.45\" "
                   "stroke=\"{7}\"/>\n",
                   x, y + 12, y + 7, x + 8, y + 2, x + 18, kMemoryFill, kMemoryStroke);
          break;
        case LegendItem::PeakLine:
          svg->put("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>\n",
                   x + 9, y, y + 12, kPeakColour);
          break;
        case LegendItem::Strip:
          svg->put("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"18\" height=\"4\" fill=\"{}\"/>\n", x, y + 8,
                   kExposedColour);
          break;
        case LegendItem::Text:
          break;
        case LegendItem::Band:
          svg->put("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"24\" height=\"12\" fill=\"{}\"/>\n", x, y, it.fills.at(0));
          draw_tp_inside_band(*svg, x, 24, y, 12, 1, 3);
          break;
        case LegendItem::DashedLine:
          svg->put("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"1.2\" "
                   "stroke-dasharray=\"5,3\"/>\n",
                   x, y + 6, x + 18, y + 6, kTargetColour);
          break;
      }
      svg->text(x + legend_swatch_width(it) + 5, y + 10, it.label, "font-size=\"11\"");
    }
    x += w + 16;
  }
  return row + 1;
}

// ---------------------------------------------------------------- memory step plots

/// A step function: value `v` from `x` until the next step's x; the last one until `x_end`.
struct Step {
  double x;
  double v;
};

/// Filled step plot in the lane [top, top + h] scaled so that `scale` reaches the top.
void step_plot(Svg& svg, const std::vector<Step>& steps, double x_end, double top, double h, double scale) {
  if (steps.empty()) return;
  double base = top + h;
  auto y_of = [&](double v) { return std::round((base - std::clamp(v / scale, 0.0, 1.0) * h) * 10) / 10; };
  svg.put("<path d=\"M{:.1f},{:.1f}", steps.front().x, base);
  double y_prev = base, x_now = steps.front().x;
  for (const Step& st : steps) {
    double y = y_of(st.v);
    if (y == y_prev) continue;  // same height: the horizontal run goes on
    if (st.x != x_now) svg.put("H{:.1f}", st.x);
    svg.put("V{:.1f}", y);
    x_now = st.x;
    y_prev = y;
  }
  svg.put("H{:.1f}V{:.1f}Z\"/>\n", x_end, base);
}

}  // namespace

std::string timeline_svg(const Trace& trace, const TimelineOptions& opt) {
  const int nranks = static_cast<int>(trace.ranks.size());

  // ---- What the trace holds.
  std::size_t timed = 0;
  int max_layer = -1;
  double mem_max = 0;
  bool has_bi = false, has_bw = false, has_rooted = false, has_tp = false, has_a2a = false;
  bool has_tp_time = false;  // a TP collective that takes time (summary rows stack only time)
  for (const auto& runs : trace.ranks)
    for (const auto& r : runs) {
      if (!is_timed(r.op.kind)) continue;
      ++timed;
      max_layer = std::max(max_layer, r.op.layer);
      mem_max = std::max(mem_max, r.memory);
      has_bi |= r.op.kind == OpKind::BackwardInput;
      has_bw |= r.op.kind == OpKind::BackwardWeight;
      has_rooted |= is_rooted(r.op.kind);
      has_a2a |= r.op.kind == OpKind::AllToAll;
      if (is_tp_collective(r.op)) has_tp = true, has_tp_time |= r.end > r.start;
    }
  if (nranks == 0 || timed == 0) return empty_svg(trace, opt);
  // TP communication inside compute ops (the cost model's inner_comm): a band in each such op's box.
  const bool has_inside = has_tp_inside(trace, opt.cost);
  // Summary rows stack a TP collective share (and name it) when some TP communication takes time.
  const bool summary_tp = has_tp_time || has_inside;

  // Loss sits at layer L (one past the last layer); it has its own colour, so L = trace.layers when known.
  const Colours colours(trace.layers > 0 ? trace.layers : max_layer + 1);
  const std::string unit = trace.memory_unit.empty() ? std::string("units") : trace.memory_unit;
  const MemoryPeak peak = trace.peak();
  // Real seconds and bytes (hardware model, measured replay) are worded as such; puzzle steps and units as before.
  const bool real = real_units(trace), measured = measured_trace(trace);
  auto mem_text = [&](double v) { return real ? memory_text(v, unit) : format_memory(v); };

  // ---- Rows: one per rank, or buckets of `per_row` ranks.
  const int max_rows = std::max(1, opt.max_detailed_ranks);
  const bool detailed = nranks <= max_rows;
  const int per_row = detailed ? 1 : (nranks + max_rows - 1) / max_rows;
  const int nrows = (nranks + per_row - 1) / per_row;
  auto row_first = [&](int row) { return row * per_row; };
  auto row_last = [&](int row) { return std::min(nranks, (row + 1) * per_row) - 1; };

  // ---- Horizontal geometry.
  double secs = to_seconds(trace.makespan());
  // The time target's line: at the target, or with the floor rule at the first Timesteps that miss it.
  const double target_line = opt.target_time.value_or(0.0) + (opt.target_time_floor ? 1 : 0);
  if (opt.target_time && target_line > secs) secs = target_line;
  if (!(secs > 0)) secs = 1;
  const double min_w = std::max(100.0, opt.min_time_width);
  const double time_w = std::clamp(secs * opt.px_per_second, min_w, std::max(min_w, opt.max_time_width));
  const double label_w = detailed ? 84 : 110;
  const double x0 = 16 + label_w;
  const double x1 = x0 + time_w;
  // Exposed communication (sim/exposed_comm.h), when the trace poses the question: strips on detailed rows,
  // each row's total (a bucket's mean) in the right margin, the mean and the most in the heading.
  const bool show_exposed = marks_exposed_comm(trace);
  const std::vector<std::vector<TimeInterval>> exposed =
      show_exposed ? exposed_comm(trace) : std::vector<std::vector<TimeInterval>>();
  std::vector<std::string> exposed_totals;  // per row
  double right_margin = 84;
  if (show_exposed) {
    for (int row = 0; row < nrows; ++row) {
      double sum = 0;
      for (int rank = row_first(row); rank <= row_last(row); ++rank)
        sum += static_cast<double>(total_length(exposed[rank]));
      const Time mean = static_cast<Time>(std::llround(sum / (row_last(row) - row_first(row) + 1)));
      exposed_totals.push_back(fmt::format("exposed {}{}", per_row > 1 ? "mean " : "",
                                           real ? time_text(mean, true) : short_seconds(mean)));
      right_margin = std::max(right_margin, std::ceil(text_width(exposed_totals.back(), 10) + 14));
    }
  }
  auto px = [&](double s) { return x0 + s / secs * time_w; };
  auto px_t = [&](Time t) { return px(to_seconds(t)); };
  const double tick = nice_step(secs * 90 / time_w);

  // ---- Sizes that depend on the number of rows.
  const bool heat = nrows > opt.memory_heatmap_above;  // memory lanes as heatmap strips
  const double row_h = nrows <= 4 ? 34 : nrows <= 8 ? 28 : nrows <= 16 ? 22 : nrows <= 32 ? 16 : 13;
  const double lane_h = nrows <= 2 ? 72 : nrows <= 4 ? 56 : nrows <= 8 ? 42 : nrows <= 16 ? 30 : nrows <= 32 ? 20 : 15;
  const double lane_gap = nrows <= 16 ? 4 : 2;
  const double row_font = nrows <= 32 ? 12 : 10;
  // Each rank draws the streams it uses as sub-rows, compute first, in stream order (so a rank receiving on
  // streams 3 and 5 draws them as sub-rows 1 and 2); at most 4 sub-rows, later streams share the last.
  std::vector<std::vector<int>> rank_streams(trace.ranks.size());
  std::size_t most_streams = 1;
  for (std::size_t rank = 0; rank < trace.ranks.size(); ++rank) {
    auto& used = rank_streams[rank];
    used.push_back(0);
    for (const auto& r : trace.ranks[rank])
      if (is_timed(r.op.kind)) used.push_back(r.op.stream);
    // A stream blocked before its first op ran still gets its sub-row, to carry the mark.
    for (const BlockedMark& b : opt.blocked)
      if (b.rank == static_cast<int>(rank)) used.push_back(b.stream);
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    most_streams = std::max(most_streams, used.size());
  }
  const int nstreams = detailed ? static_cast<int>(std::min<std::size_t>(most_streams, 4)) : 1;
  auto lane_of = [&](int rank, int stream) {
    const auto& used = rank_streams[rank];
    const int at = static_cast<int>(std::lower_bound(used.begin(), used.end(), stream) - used.begin());
    return std::min(at, nstreams - 1);
  };
  const double box_font = row_h >= 28 ? 11 : row_h >= 22 ? 10 : row_h >= 16 ? 9 : 8;

  // ---- Text of the heading.
  const std::string title = (opt.title.empty() ? std::string("timeline") : opt.title) +
                            (opt.error.empty() ? "" : " - FAILED");
  const std::vector<std::string> banner = opt.error.empty() ? std::vector<std::string>() : failure_lines(opt.error);
  std::string line1;
  if (real) {
    // The puzzles' "Timesteps" (the start of the last op) means nothing in real time: the step takes its makespan.
    line1 = fmt::format("step time {}  \u00b7  peak memory {} on {} {} at {}{}  \u00b7  {}{}",
                        time_text(trace.makespan(), true), memory_text(peak.memory, unit), opt.row_name, peak.rank,
                        time_text(peak.time, true), measured ? " (as an op started)" : "",
                        measured ? "" : "cost model ", trace.cost_model);
  } else {
    line1 = fmt::format("Timesteps {}  \u00b7  makespan {}  \u00b7  peak memory {} {} on {} {} at t={}",
                        format_time(trace.timesteps()), format_time(trace.makespan()), format_memory(peak.memory), unit,
                        opt.row_name, peak.rank, format_time(peak.time));
    line1 += fmt::format("  \u00b7  cost model {}, memory in {}",
                         trace.cost_model.empty() ? std::string("(unnamed)") : trace.cost_model, unit);
  }
  std::string line2 = fmt::format("{} rank{}, {} layer{}, {} batch{}, {} timed ops", nranks, nranks == 1 ? "" : "s",
                                  trace.layers, trace.layers == 1 ? "" : "s", trace.batches,
                                  trace.batches == 1 ? "" : "es", timed);
  if (opt.target_time) line2 += fmt::format("  \u00b7  target time {}", format_memory(*opt.target_time));
  if (opt.target_memory) line2 += fmt::format("  \u00b7  target memory {} {}", format_memory(*opt.target_memory), unit);
  if (show_exposed) line2 += "  \u00b7  " + exposed_heading(exposed, trace.makespan(), real);
  // A measured replay: what its lanes are, and the allocator's own peak (the replay report's "measured").
  std::string line_memory;
  if (measured) {
    line_memory = "memory lanes: bytes allocated as each op started (where the simulator samples too)";
    if (!opt.allocator_peak.empty()) {
      const auto most = std::max_element(opt.allocator_peak.begin(), opt.allocator_peak.end());
      line_memory += fmt::format("; the peak of the device allocator over the run, with the buffers ops free within "
                                 "themselves: {} on rank {}",
                                 memory_text(*most, unit), most - opt.allocator_peak.begin());
    }
  }
  std::string line3;
  if (!detailed)
    line3 = fmt::format(
        "Summarised: {} ranks in {} rows of {}; each time bin stacks the share of the row's rank-time in each op "
        "kind (forward, backward, update, collective, {}send/recv); memory lanes show the row's highest memory.",
        nranks, nrows, per_row, summary_tp ? "TP collective, " : "");
  const std::string line_tp = has_inside ? tp_inside_heading(trace, opt.cost, real) : std::string();

  double width = x1 + right_margin;
  width = std::max({width, text_width(title, 19.8) + 32, text_width(line1, 12.5) + 32, text_width(line2, 11) + 32,
                    text_width(line3, 11) + 32, text_width(line_memory, 11) + 32, text_width(line_tp, 11) + 32});
  for (const auto& l : banner) width = std::max(width, text_width(l, 12.5) + 40);
  width = std::ceil(width);

  // ---- Legend.
  std::vector<LegendItem> items;
  if (detailed) {
    int L = colours.layers();
    std::vector<int> shown;
    if (L <= 4) {
      for (int l = 0; l < L; ++l) shown.push_back(l);
    } else {
      shown = {0, L / 3, (2 * L) / 3, L - 1};
    }
    LegendItem fwd{LegendItem::Boxes, {}, 1, false, L == 1 ? "forward" : fmt::format("forward, layers 0 to {}", L - 1)};
    LegendItem bwd{LegendItem::Boxes, {}, 1, false, "backward"};
    for (int l : shown) {
      fwd.fills.push_back(colours.forward(l));
      bwd.fills.push_back(colours.backward(l));
    }
    items.push_back(fwd);
    items.push_back(bwd);
    if (has_bi) items.push_back({LegendItem::Boxes, {backward_input_colour(0, L)}, 1, false, "backward input (I)"});
    if (has_bw) items.push_back({LegendItem::Boxes, {backward_weight_colour(0, L)}, 1, true, "backward weight (W)"});
    items.push_back({LegendItem::Boxes, {kUpdateColour}, 1, false, "update"});
    items.push_back({LegendItem::Boxes, {kAllGatherColour, kReduceScatterColour, kAllReduceColour, kNoLayerColour}, 1,
                     false, "all-gather (AG), reduce-scatter (RS), all-reduce (AR), barrier (B)"});
    if (has_rooted)  // (only when drawn: the figures without them stay as they were)
      items.push_back({LegendItem::Boxes, {kBroadcastColour, kReduceColour}, 1, false, "broadcast (BC), reduce (RD)"});
    if (has_a2a)  // (only when drawn, as the rooted collectives)
      items.push_back({LegendItem::Boxes, {kAllToAllColour}, 1, false,
                       "all-to-all (A2A): an MoE layer's tokens to their experts (dispatch) and back (combine)"});
    if (has_tp)
      items.push_back({LegendItem::Boxes, {kTpCollectiveColour}, 1, false,
                       "TP collective (AR, RS, AG of a layer's partial sums and activations over its TP group)"});
    if (has_inside)
      items.push_back({LegendItem::Band, {colours.forward(0)}, 1, false,
                       "TP communication inside a compute op (band: its length is the time, ending at the op's end; "
                       "tooltip: seconds)"});
    items.push_back({LegendItem::Boxes, {kPassColour}, 1, false, "send/recv (pass)"});
    items.push_back({LegendItem::Bar, {}, 1, false, "loss"});
    if (show_exposed)
      items.push_back({LegendItem::Strip, {}, 1, false,
                       "exposed communication (under the rank: its communication runs and none of its compute does)"});
    items.push_back({LegendItem::Text, {}, 1, false,
                     "labels: L2 = layer 2, then a forward's or backward's batches (microbatches: 0 1 2 3 or 0-3), or "
                     "the op (U update, AG/RS/AR); \u2192N send to rank N, \u2190N receive"});
  } else {
    for (Cat c : {Cat::Forward, Cat::Backward, Cat::Update, Cat::Collective, Cat::TpCollective, Cat::Pass})
      if (c != Cat::TpCollective || summary_tp)  // (only when drawn: the figures without TP stay as they were)
        items.push_back({LegendItem::Boxes, {summary_colour(c, colours.layers())}, 1, false,
                         c != Cat::TpCollective ? cat_name(c)
                         : has_inside       ? "TP collective (over a TP group, and inside compute ops)"
                                            : "TP collective (over a TP group)"});
    items.push_back({LegendItem::Text, {}, 1, false,
                     "each time bin stacks the shares of the row's rank-time spent in each kind (full height = all busy)"});
  }
  if (heat)
    items.push_back({LegendItem::Boxes, {kMemoryStroke, kMemoryStroke, kMemoryStroke, kMemoryStroke}, 0.2, false,
                     detailed ? "memory (heatmap: darker = more)" : "memory (row's highest; darker = more)"});
  else
    items.push_back({LegendItem::Area, {}, 1, false, detailed ? "memory" : "memory (row's highest)"});
  items.push_back({LegendItem::PeakLine, {}, 1, false, "peak memory"});
  if (opt.target_time || opt.target_memory) items.push_back({LegendItem::DashedLine, {}, 1, false, "target"});

  // ---- Vertical layout.
  const double banner_h = failure_banner_height(banner.size());
  double y = 50 + banner_h;  // line1 baseline
  const double line1_y = y;
  const double line2_y = y += 17;
  const double line3_y = line3.empty() ? y : (y += 16);
  const double line_memory_y = line_memory.empty() ? y : (y += 16);
  const double line_tp_y = line_tp.empty() ? y : (y += 16);
  const double legend_top = y + 12;
  const int legend_rows = legend(nullptr, items, 16, legend_top, width - 16);
  y = legend_top + legend_rows * 18 + 6;
  const double target_label_y = y + 11;
  if (opt.target_time) y += 15;
  const double tick_label_y = y + 11;
  const double axis_y = y + 16;
  const double rows_top = axis_y + 3;
  const double rows_bottom = rows_top + nrows * row_h;
  const double mem_heading_y = rows_bottom + 24;
  const double lanes_top = rows_bottom + 32;
  // The peak's label gets a band of its own above the peak's lane, so that it never covers the curve.
  const bool peak_marked = peak.memory > 0 && peak.rank >= 0 && peak.rank < nranks;
  const int peak_row = peak_marked ? peak.rank / per_row : nrows;
  const double peak_band = peak_marked ? 14 : 0;
  auto lane_top = [&](int row) { return lanes_top + row * (lane_h + lane_gap) + (row >= peak_row ? peak_band : 0); };
  const double lanes_bottom = lane_top(nrows) - lane_gap;
  const double bottom_axis_y = lanes_bottom + 4;
  std::string caption;
  // The caption explains a missed memory target: what was resident at the peak.
  if (opt.peak_explanation && peak.memory > 0 && opt.target_memory && peak.memory > *opt.target_memory)
    caption = peak_caption(peak, *opt.peak_explanation,
                           static_cast<std::size_t>(std::max(60.0, (width - 32) / (0.6 * 11.5))));
  const double caption_y = bottom_axis_y + 36;
  const double height = std::ceil(bottom_axis_y + 26 + (caption.empty() ? 0 : 18));

  Svg svg;
  svg.s.reserve(4096 + timed * (detailed ? 200 : 0));
  open_svg(svg, width, height, title);
  draw_failure_banner(svg, banner, 40, width);
  svg.text(16, line1_y, line1, "font-size=\"12.5\"");
  svg.text(16, line2_y, line2, "font-size=\"11\" fill=\"#555555\"");
  if (!line3.empty()) svg.text(16, line3_y, line3, "font-size=\"11\" fill=\"#555555\"");
  if (!line_memory.empty()) svg.text(16, line_memory_y, line_memory, "font-size=\"11\" fill=\"#555555\"");
  if (!line_tp.empty()) svg.text(16, line_tp_y, line_tp, "font-size=\"11\" fill=\"#555555\"");
  legend(&svg, items, 16, legend_top, width - 16);

  // ---- Row and lane backgrounds, labels.
  svg.put("<g>\n");
  for (int row = 0; row < nrows; ++row) {
    double ry = rows_top + row * row_h;
    if (row % 2 == 1)
      svg.put("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#f3f3f3\"/>\n", x0, ry, time_w,
              row_h);
    svg.put("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#fafafa\" stroke=\"#dddddd\" "
            "stroke-width=\"0.5\"/>\n",
            x0, lane_top(row), time_w, lane_h);
  }
  svg.put("</g>\n");
  svg.put("<g font-size=\"{}\" text-anchor=\"end\">\n", row_font);
  for (int row = 0; row < nrows; ++row) {
    std::string name = detailed ? fmt::format("{} {}", opt.row_name, row) : bucket_name(opt.row_name.c_str(), row_first(row), row_last(row));
    svg.text(x0 - 8, rows_top + row * row_h + row_h / 2 + row_font * 0.35, name, "class=\"row-label\"");
    std::string mem = detailed || row_first(row) == row_last(row)
                          ? fmt::format("mem {}", row_first(row))
                          : fmt::format("mem {}-{}", row_first(row), row_last(row));
    svg.text(x0 - 8, lane_top(row) + lane_h / 2 + row_font * 0.35, mem, "class=\"lane-label\" fill=\"#555555\"");
  }
  svg.put("</g>\n");
  if (show_exposed) {
    svg.put("<g font-size=\"10\" fill=\"{}\">\n", kExposedColour);
    for (int row = 0; row < nrows; ++row)
      svg.text(x1 + 6, rows_top + row * row_h + row_h / 2 + 3.5, exposed_totals[row], "class=\"exposed-total\"");
    svg.put("</g>\n");
  }

  // ---- Time axis (top and bottom) with a grid.
  const long long nticks = static_cast<long long>(std::floor(secs / tick + 1e-9));
  svg.put("<g stroke=\"#e2e2e2\" stroke-width=\"1\">\n");
  for (long long i = 0; i <= nticks; ++i) {
    double x = px(static_cast<double>(i) * tick);
    svg.put("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\"/>\n", x, rows_top, rows_bottom);
    svg.put("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\"/>\n", x, lanes_top, lanes_bottom);
  }
  svg.put("</g>\n");
  svg.put("<g stroke=\"#555555\" stroke-width=\"1\">\n");
  for (double ay : {axis_y, bottom_axis_y}) {
    svg.put("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>\n", x0, ay, x1, ay);
    for (long long i = 0; i <= nticks; ++i) {
      double x = px(static_cast<double>(i) * tick);
      double dy = ay == axis_y ? -4 : 4;
      svg.put("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\"/>\n", x, ay, ay + dy);
    }
  }
  svg.put("</g>\n");
  svg.put("<g font-size=\"11\" fill=\"#333333\" text-anchor=\"middle\">\n");
  for (long long i = 0; i <= nticks; ++i) {
    double x = px(static_cast<double>(i) * tick);
    std::string label = tick_label(static_cast<double>(i) * tick, tick);
    svg.text(x, tick_label_y, label);
    svg.text(x, bottom_axis_y + 15, label);
  }
  svg.put("</g>\n");
  // The axis' name ends clear of the first tick's label, which is centred on x0.
  const char* axis_name = real ? "time (s)" : "time";
  const double name_x = x0 - 6 - text_width(tick_label(0, tick), 11) / 2;
  svg.text(name_x, tick_label_y, axis_name, "font-size=\"11\" fill=\"#333333\" text-anchor=\"end\"");
  svg.text(name_x, bottom_axis_y + 15, axis_name, "font-size=\"11\" fill=\"#333333\" text-anchor=\"end\"");

  // ---- The ops.
  struct Label {
    double x, y;
    std::string text;
  };
  std::vector<Label> labels;
  // Sub-rows of a detailed rank's row: one per stream it uses, from the top.
  const double gap = nstreams > 1 ? 1 : 0;
  const double sub_h = (row_h - 4 - gap * (nstreams - 1)) / nstreams;
  auto sub_top = [&](int rank, int lane) { return rows_top + rank * row_h + 2 + lane * (sub_h + gap); };
  if (detailed) {
    const double font = std::min(box_font, sub_h - 1);

    auto title_of = [&](int rank, const OpRun& r) {
      std::string t = real ? fmt::format("rank {}: {}\nstart {} s, end {} s ({})\nmemory at start {}", rank,
                                         r.op.describe(), format_time(r.start), format_time(r.end),
                                         time_text(r.end - r.start, true), memory_text(r.memory, unit))
                           : fmt::format("rank {}: {}\nstart {}, end {}\nmemory at start {} {}", rank, r.op.describe(),
                                         format_time(r.start), format_time(r.end), format_memory(r.memory), unit);
      if (has_inside)
        if (std::string inside = tp_inside_line(opt.cost, r, real); !inside.empty()) t += "\n" + inside;
      if (!r.op.where.empty()) t += "\n" + r.op.where;
      return t;
    };
    auto draw_box = [&](int rank, const OpRun& r, double xa, double w, double by) {
      Look lk = colours.look(r.op);
      svg.put("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"{}{}><title>", xa, by,
              std::max(w, 0.1), sub_h, *lk.fill, "",
              lk.dashed ? " stroke-dasharray=\"3,2\" stroke-opacity=\"0.7\"" : "");
      append_escaped(svg.s, title_of(rank, r));
      svg.s += "</title></rect>\n";
      if (has_inside) draw_tp_inside_band(svg, xa, std::max(w, 0.1), by, sub_h, tp_inside(opt.cost, r), r.end - r.start);
      if (font >= 6) {
        std::string text = box_label(r.op, w, font);
        if (!text.empty()) labels.push_back({xa + w / 2, by + sub_h / 2 + font * 0.36, std::move(text)});
      }
    };
    struct Cluster {
      std::vector<const OpRun*> ops;
      double xa = 0, xb = 0;
    };
    auto flush = [&](int rank, Cluster& c, double by) {
      if (c.ops.empty()) return;
      if (c.ops.size() == 1) {
        draw_box(rank, *c.ops.front(), c.xa, std::max(c.xb - c.xa, 1.0), by);
      } else {
        // Too narrow to draw one by one: one box in the colour of the longest op, counting the ops by kind.
        std::array<int, 16> count{};
        const OpRun* longest = c.ops.front();
        for (const OpRun* r : c.ops) {
          ++count[static_cast<std::size_t>(r->op.kind)];
          if (r->end - r->start > longest->end - longest->start) longest = r;
        }
        std::string what;
        for (std::size_t k = 0; k < count.size(); ++k)
          if (count[k] > 0)
            what += fmt::format("{}{} {}", what.empty() ? "" : ", ", count[k], op_name(static_cast<OpKind>(k)));
        Look lk = colours.look(longest->op);
        svg.put("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"{}><title>", c.xa, by,
                std::max(c.xb - c.xa, 1.0), sub_h, *lk.fill, "");
        append_escaped(svg.s, fmt::format("rank {}: {} ops from {} to {}, too short to draw one by one: {}", rank,
                                          c.ops.size(), format_time(c.ops.front()->start),
                                          format_time(c.ops.back()->end), what));
        svg.s += "</title></rect>\n";
      }
      c.ops.clear();
    };

    struct Marker {
      int rank;
      const OpRun* run;
      double x, y;
    };
    std::vector<Marker> markers;  // zero-time ops (loss), drawn on top
    std::vector<std::vector<const OpRun*>> lanes(static_cast<std::size_t>(nstreams));
    svg.put("<g stroke=\"#000000\" stroke-opacity=\"0.35\" stroke-width=\"0.5\">\n");
    for (int rank = 0; rank < nranks; ++rank) {
      for (auto& l : lanes) l.clear();
      for (const auto& r : trace.ranks[rank])
        if (is_timed(r.op.kind)) lanes[lane_of(rank, r.op.stream)].push_back(&r);
      for (int s = 0; s < nstreams; ++s) {
        auto& ops = lanes[s];
        std::stable_sort(ops.begin(), ops.end(), [](const OpRun* a, const OpRun* b) { return a->start < b->start; });
        const double by = sub_top(rank, s);
        Cluster c;
        for (const OpRun* r : ops) {
          double xa = px_t(r->start), xb = px_t(r->end);
          if (r->end <= r->start) {
            markers.push_back({rank, r, xa, by});
            continue;
          }
          if (xb - xa >= opt.merge_below_px) {
            flush(rank, c, by);
            draw_box(rank, *r, xa, xb - xa, by);
            continue;
          }
          if (!c.ops.empty() && (xa - c.xb >= 1.0 || c.xb - c.xa >= 3.0)) flush(rank, c, by);
          if (c.ops.empty()) c.xa = xa;
          c.ops.push_back(r);
          c.xb = std::max(c.xb, xb);
        }
        flush(rank, c, by);
      }
    }
    for (const Marker& m : markers) {
      svg.put("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"2.4\" height=\"{:.1f}\" fill=\"{}\" stroke=\"none\"><title>",
              m.x - 1.2, m.y - 1, sub_h + 2, *colours.look(m.run->op).fill);
      append_escaped(svg.s, title_of(m.rank, *m.run));
      svg.s += "</title></rect>\n";
    }
    svg.put("</g>\n");
    // Exposed communication: a strip along the bottom of the row, over the boxes' lower edge.
    if (show_exposed) {
      const double strip_h = row_h >= 28 ? 4 : row_h >= 16 ? 3 : 2;
      const double px_per_second = time_w / secs;
      svg.put("<g class=\"exposed-comm\" fill=\"{}\">\n", kExposedColour);
      for (int rank = 0; rank < nranks; ++rank)
        draw_exposed_strips(svg, rank, exposed_strips(exposed[rank], px_per_second), x0, px_per_second,
                            rows_top + (rank + 1) * row_h - strip_h, strip_h);
      svg.put("</g>\n");
    }
    if (!labels.empty()) {
      svg.put("<g font-size=\"{}\" text-anchor=\"middle\" fill=\"#111111\" pointer-events=\"none\">\n", font);
      for (const auto& l : labels) svg.text(l.x, l.y, l.text);
      svg.put("</g>\n");
    }
  } else {
    SummaryLayout layout;
    layout.x0 = x0;
    layout.time_w = time_w;
    layout.secs = secs;
    layout.rows_top = rows_top;
    layout.row_h = row_h;
    layout.per_row = per_row;
    layout.bin_px = opt.summary_bin_px;
    draw_summary_rows(svg, trace, layout, colours.layers(), has_inside ? opt.cost : nullptr);
  }

  // ---- Blocked ranks (a deadlock, or ranks left waiting by an error): each marked from the time it began to
  // wait, on the sub-row of the stream it waits on (a stream runs in order, so nothing after the mark ran
  // there); a row of several ranks: its first blocked rank's mark, the list being in rank order.
  int marked_row = -1, marked_lane = -1;
  for (const BlockedMark& b : opt.blocked) {
    if (b.rank < 0 || b.rank >= nranks) continue;
    const int row = b.rank / per_row;
    const int lane = detailed ? lane_of(b.rank, b.stream) : 0;
    if (row == marked_row && (!detailed || lane == marked_lane)) continue;
    marked_row = row, marked_lane = lane;
    const double top = detailed ? sub_top(b.rank, lane) : rows_top + row * row_h + 2;
    draw_blocked_mark(svg, b, px_t(std::clamp<Time>(b.since, 0, trace.makespan())), x1, top,
                      detailed ? sub_h : row_h - 4);
  }

  // ---- Memory lanes.
  const double scale = std::max({mem_max, opt.target_memory.value_or(0.0), 1e-300});
  // The plot leaves a little room at the top of each lane so the highest step, the peak and the target line
  // stay off the lane's border.
  const double lane_pad = std::min(6.0, std::floor(lane_h * 0.15));
  const double plot_h = lane_h - lane_pad;
  auto mem_y = [&](int row, double v) { return lane_top(row) + lane_h - std::clamp(v / scale, 0.0, 1.0) * plot_h; };
  svg.text(x0, mem_heading_y,
           fmt::format("memory per {}{}{}", detailed ? "rank" : "row of ranks",
                       measured ? ": bytes allocated as each op started" : real ? "" : " in " + unit,
                       heat ? fmt::format(", as a heatmap: darker = more, full colour = {}", mem_text(scale))
                            : fmt::format("; each lane from 0 to {}", mem_text(scale))),
           "font-size=\"12\" fill=\"#333333\"");
  svg.put("<g fill=\"{}\" fill-opacity=\"0.45\" stroke=\"{}\" stroke-width=\"1\" stroke-linejoin=\"miter\">\n",
          kMemoryFill, kMemoryStroke);
  std::vector<Step> steps;
  auto draw_lane = [&](const std::vector<Step>& st, double x_end, int row) {
    if (!heat) return step_plot(svg, st, x_end, lane_top(row) + lane_pad, plot_h, scale);
    std::vector<std::pair<double, double>> pairs;
    for (const Step& p : st) pairs.emplace_back(p.x, p.v);
    heatmap_strip(svg, pairs, x_end, lane_top(row) + 1, lane_h - 2, scale);
  };
  if (detailed) {
    for (int rank = 0; rank < nranks; ++rank) {
      steps.clear();
      Time end = 0;
      for (const auto& r : trace.ranks[rank]) {
        if (!is_timed(r.op.kind)) continue;
        steps.push_back({px_t(r.start), r.memory});
        end = std::max(end, r.end);
      }
      // Held from each op's start until the next op's start: samples out of time order (several streams) are
      // drawn in time order.
      std::stable_sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.x < b.x; });
      // What the first op finds resident (its weights, loaded before any timed op) is held from t=0.
      if (!steps.empty()) steps.front().x = x0;
      draw_lane(steps, px_t(end), rank);
    }
  } else {
    const int nbins = std::max(1, static_cast<int>(std::floor(time_w / std::max(1.0, opt.summary_bin_px))));
    const double bin_s = secs / nbins;
    std::vector<double> mem(static_cast<std::size_t>(nbins));
    std::vector<std::pair<Time, double>> samples;
    for (int row = 0; row < nrows; ++row) {
      std::fill(mem.begin(), mem.end(), -1.0);
      for (int rank = row_first(row); rank <= row_last(row); ++rank) {
        samples.clear();
        Time end = 0;
        for (const auto& r : trace.ranks[rank]) {
          if (!is_timed(r.op.kind)) continue;
          samples.emplace_back(r.start, r.memory);
          end = std::max(end, r.end);
        }
        std::stable_sort(samples.begin(), samples.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        if (!samples.empty()) samples.front().first = 0;  // held from t=0, as in the detailed lanes
        for (std::size_t k = 0; k < samples.size(); ++k) {
          double s = to_seconds(samples[k].first);
          double e = to_seconds(k + 1 < samples.size() ? samples[k + 1].first : end);
          int i0 = std::clamp(static_cast<int>(std::floor(s / bin_s)), 0, nbins - 1);
          int i1 = e > s ? std::clamp(static_cast<int>(std::ceil(e / bin_s)) - 1, i0, nbins - 1) : i0;
          for (int i = i0; i <= i1; ++i) mem[i] = std::max(mem[i], samples[k].second);
        }
      }
      steps.clear();
      int last = -1;
      for (int i = 0; i < nbins; ++i)
        if (mem[i] >= 0) {
          if (steps.empty() || mem[i] != steps.back().v || last != i - 1) steps.push_back({px(i * bin_s), mem[i]});
          last = i;
        } else if (last == i - 1 && i > 0) {
          steps.push_back({px(i * bin_s), 0});
        }
      draw_lane(steps, last >= 0 ? px((last + 1) * bin_s) : x0, row);
    }
  }
  svg.put("</g>\n");

  // ---- Target memory: a dashed line in every lane (not in heatmap strips, which have no height scale).
  if (opt.target_memory && !heat) {
    svg.put("<g stroke=\"{}\" stroke-width=\"1.2\" stroke-dasharray=\"6,4\">\n", kTargetColour);
    for (int row = 0; row < nrows; ++row) {
      double ty = mem_y(row, *opt.target_memory);
      svg.put("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>\n", x0, ty, x1, ty);
    }
    svg.put("</g>\n");
    double font = std::min(10.0, lane_h - 2);
    svg.put("<g font-size=\"{:.0f}\" fill=\"{}\">\n", font, kTargetColour);
    for (int row = 0; row < nrows; ++row) {
      double ty = mem_y(row, *opt.target_memory);
      svg.text(x1 + 4, std::clamp(ty + font * 0.35, lane_top(row) + font * 0.8, lane_top(row) + lane_h),
               "target", "class=\"target-label\"");
    }
    svg.put("</g>\n");
  }

  // ---- Peak memory: a red line on its rank's lane with "peak N at t".
  if (peak_marked) {
    const int row = peak_row;
    const double top = lane_top(row), base = top + lane_h;
    // Marked where it is held longest (a zero-width spike at the first peak would hide it).
    const PeakSpan span = peak_held_longest(trace, peak);
    const double x = std::max(x0, px_t(span.start));
    const double py = heat ? top + lane_h / 2 : mem_y(row, peak.memory);
    std::string label =
        real ? (span.start == peak.time
                    ? fmt::format("peak {} at {}", mem_text(peak.memory), time_text(peak.time, true))
                    : fmt::format("peak {} from {} to {} (first at {})", mem_text(peak.memory),
                                  time_text(span.start, true), time_text(span.end, true), time_text(peak.time, true)))
             : (span.start == peak.time
                    ? fmt::format("peak {} at {}", format_memory(peak.memory), format_time(peak.time))
                    : fmt::format("peak {} at {}-{} (first at {})", format_memory(peak.memory),
                                  format_time(span.start), format_time(span.end), format_time(peak.time)));
    if (!detailed) label += fmt::format(" (rank {})", peak.rank);
    const double font = 10.5;
    const double tw = text_width(label, font) * 1.1;  // bold
    const bool right = x + 4 + tw <= width - 4;
    const double tx = right ? x + 4 : x - 4;
    // In the band above the lane, off the curve (the white behind it hides only the grid).
    const double ty = top - 3;
    svg.put("<g class=\"peak\"><title>");
    append_escaped(svg.s,
                   peak_tooltip(peak, span, opt.peak_explanation ? &*opt.peak_explanation : nullptr, unit, real));
    svg.put("</title>\n");
    if (px_t(span.end) > x + 0.5)
      svg.put("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"2\"/>\n", x, py,
              px_t(span.end), py, kPeakColour);
    svg.put("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>\n", x,
            top - peak_band + 1, base, kPeakColour);
    svg.put("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", x, py, kPeakColour);
    svg.put("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#ffffff\"/>\n",
            right ? tx - 1 : tx - tw - 1, ty - font, tw + 2, font + 3);
    svg.text(tx, ty, label, fmt::format("font-size=\"{}\" font-weight=\"bold\" fill=\"{}\"{}", font, kPeakColour,
                                        right ? "" : " text-anchor=\"end\""));
    svg.put("</g>\n");
  }

  // ---- Target time: a dashed vertical line through rows and lanes.
  if (opt.target_time) {
    const double x = px(target_line);
    std::string label = opt.target_time_floor
                            ? fmt::format("target {}: Timesteps below {} meet it (rounded down)",
                                          format_memory(*opt.target_time), format_memory(target_line))
                            : fmt::format("target {}", format_memory(*opt.target_time));
    const bool right = x + text_width(label, 11) + 4 <= width - 4;
    svg.put("<g class=\"target-time\">\n");
    svg.put("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" stroke-width=\"1.5\" "
            "stroke-dasharray=\"6,4\"/>\n",
            x, target_label_y + 3, lanes_bottom, kTargetColour);
    svg.text(right ? x + 3 : x - 3, target_label_y, label,
             fmt::format("font-size=\"11\" fill=\"{}\"{}", kTargetColour, right ? "" : " text-anchor=\"end\""));
    svg.put("</g>\n");
  }

  if (!caption.empty()) svg.text(16, caption_y, caption, fmt::format("class=\"peak-caption\" font-size=\"11.5\" fill=\"{}\"", kPeakColour));

  svg.put("</svg>\n");
  return std::move(svg.s);
}

}  // namespace trainsim::visualize
