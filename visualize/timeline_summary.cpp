#include "visualize/timeline_summary.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/tp_ops.h"
#include "visualize/palette.h"
#include "visualize/timeline_tp_inside.h"

namespace trainsim::visualize {


Cat category(const Op& op) {
  switch (op.kind) {
    case OpKind::Forward: return Cat::Forward;
    case OpKind::Backward:
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight: return Cat::Backward;
    case OpKind::Update: return Cat::Update;
    case OpKind::Send:
    case OpKind::Recv: return Cat::Pass;
    case OpKind::Loss: return Cat::Loss;
    default: return is_tp_collective(op) ? Cat::TpCollective : Cat::Collective;
  }
}

const char* cat_name(Cat c) {
  switch (c) {
    case Cat::Forward: return "forward";
    case Cat::Backward: return "backward";
    case Cat::Update: return "update";
    case Cat::Collective: return "collective";
    case Cat::TpCollective: return "TP collective";
    case Cat::Pass: return "send/recv";
    case Cat::Loss: return "loss";
  }
  return "?";
}

/// Colour of a category in summary rows: the detailed view's (the first layer's forward and backward, the
/// all-reduce colour for every data-parallel collective, the TP collectives' magenta for TP collectives).
std::string summary_colour(Cat c, int layers) {
  switch (c) {
    case Cat::Forward: return summary_forward_colour(layers);
    case Cat::Backward: return summary_backward_colour(layers);
    case Cat::Update: return kUpdateColour;
    case Cat::Collective: return kAllReduceColour;
    case Cat::TpCollective: return kTpCollectiveColour;
    case Cat::Pass: return kPassColour;
    case Cat::Loss: return kLossColour;
  }
  return kPassColour;
}

std::string bucket_name(const char* singular, int a, int b) {
  return a == b ? fmt::format("{} {}", singular, a) : fmt::format("{}s {}-{}", singular, a, b);
}

void draw_summary_rows(Svg& svg, const Trace& trace, const SummaryLayout& L, int layers, const CostModel* cost) {
  const int nranks = static_cast<int>(trace.ranks.size());
  const int per_row = std::max(1, L.per_row);
  const int nrows = (nranks + per_row - 1) / per_row;
  auto row_first = [&](int row) { return row * per_row; };
  auto row_last = [&](int row) { return std::min(nranks, (row + 1) * per_row) - 1; };
  auto px = [&](double s) { return L.x0 + s / L.secs * L.time_w; };
  const double x0 = L.x0, time_w = L.time_w, secs = L.secs, rows_top = L.rows_top, row_h = L.row_h;
  // Summary rows: busy time per (row, bin, category).
  const int nbins = std::max(1, static_cast<int>(std::floor(time_w / std::max(1.0, L.bin_px))));
  const double bin_s = secs / nbins;
  std::vector<double> busy(static_cast<std::size_t>(nrows) * nbins * kBusyCats, 0.0);
  std::vector<std::size_t> row_ops(static_cast<std::size_t>(nrows), 0);
  for (int rank = 0; rank < nranks; ++rank) {
    const int row = rank / per_row;
    for (const auto& r : trace.ranks[rank]) {
      if (!is_timed(r.op.kind)) continue;
      ++row_ops[row];
      Cat c = category(r.op);
      if (c == Cat::Loss || r.end <= r.start) continue;
      auto add = [&](Cat cat, double s, double e) {
        int i0 = std::clamp(static_cast<int>(std::floor(s / bin_s)), 0, nbins - 1);
        int i1 = std::clamp(static_cast<int>(std::ceil(e / bin_s)) - 1, i0, nbins - 1);
        for (int i = i0; i <= i1; ++i) {
          double overlap = std::min(e, (i + 1) * bin_s) - std::max(s, i * bin_s);
          if (overlap > 0) busy[(static_cast<std::size_t>(row) * nbins + i) * kBusyCats + static_cast<int>(cat)] += overlap;
        }
      };
      // The TP communication inside a compute op: its last `inside` of time, as the detailed view's band.
      const Time inside = tp_inside(cost, r);
      if (inside > 0) {
        add(c, to_seconds(r.start), to_seconds(r.end - inside));
        add(Cat::TpCollective, to_seconds(r.end - inside), to_seconds(r.end));
      } else {
        add(c, to_seconds(r.start), to_seconds(r.end));
      }
    }
  }
  // Each bin is a stacked column: from the bottom, one segment per category (forward, backward, update,
  // collective, TP collective, send/recv) as tall as its share of the row's rank-time in the bin, in tenths
  // of the row's height. Mixed work (1F1B's steady state) shows as mixed. A run of bins with equal columns is one
  // rectangle per segment; all segments of one category in the row are one <path> with one tooltip.
  std::vector<std::string> paths(kBusyCats);
  const double inner_h = row_h - 2;
  svg.put("<g>\n");
  for (int row = 0; row < nrows; ++row) {
    const int members = row_last(row) - row_first(row) + 1;
    const double ry = rows_top + row * row_h + 1;
    svg.put("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#ffffff\" fill-opacity=\"0\" "
            "stroke=\"#cccccc\" stroke-width=\"0.5\"><title>",
            x0, ry, time_w, row_h - 2);
    append_escaped(svg.s, fmt::format("{}: {} timed ops", bucket_name("rank", row_first(row), row_last(row)),
                                      row_ops[row]));
    svg.s += "</title></rect>\n";
    auto column = [&](int i) {
      const double* b = &busy[(static_cast<std::size_t>(row) * nbins + i) * kBusyCats];
      std::array<int, kBusyCats> tenths{};
      for (int c = 0; c < kBusyCats; ++c)
        tenths[c] = std::clamp(static_cast<int>(std::lround(b[c] / (bin_s * members) * 10)), 0, 10);
      return tenths;
    };
    for (auto& p : paths) p.clear();
    int i = 0;
    while (i < nbins) {
      auto col = column(i);
      int j = i + 1;
      while (j < nbins && column(j) == col) ++j;
      double filled = 0;
      for (int c = 0; c < kBusyCats; ++c) {
        if (col[c] == 0) continue;
        double h = std::min(inner_h - filled, inner_h * col[c] / 10.0);
        if (h <= 0) break;
        fmt::format_to(std::back_inserter(paths[c]), "M{:.1f},{:.1f}h{:.1f}v{:.1f}h{:.1f}z", px(i * bin_s),
                       ry + inner_h - filled - h, px(j * bin_s) - px(i * bin_s), h, px(i * bin_s) - px(j * bin_s));
        filled += h;
      }
      i = j;
    }
    for (int cat = 0; cat < kBusyCats; ++cat) {
      if (paths[cat].empty()) continue;
      svg.put("<path class=\"share\" d=\"{}\" fill=\"{}\"><title>", paths[cat],
              summary_colour(static_cast<Cat>(cat), layers));
      append_escaped(svg.s, fmt::format("{}: {}; height = its share of the row's rank-time in each bin",
                                        bucket_name("rank", row_first(row), row_last(row)),
                                        cat_name(static_cast<Cat>(cat))));
      svg.s += "</title></path>\n";
    }
  }
  svg.put("</g>\n");
}

}  // namespace trainsim::visualize
