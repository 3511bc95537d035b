// Summarised timeline rows (many ranks): ranks bucketed into rows, each row's time cut into bins, each bin a
// stacked column of the shares of the row's rank-time per op category, in the detailed view's colours. Also
// the op categories the timeline's legend names.
#pragma once

#include <string>

#include "sim/cost_model.h"
#include "sim/trace.h"
#include "visualize/svg_writer.h"

namespace trainsim::visualize {

/// Op categories of the timeline (summary rows and legend), in the order a summary bin stacks them from the
/// bottom.
enum class Cat { Forward, Backward, Update, Collective, TpCollective, Pass, Loss };
/// Categories counted in summary bins (loss takes no time).
inline constexpr int kBusyCats = 6;

/// The category of an op (backward halves are backward; tensor-parallel collectives, sim/tp_ops.h
/// is_tp_collective, are "TP collective", the other collectives one category; send/recv "pass").
Cat category(const Op& op);
/// "forward", "backward", "update", "collective", "TP collective", "send/recv", "loss".
const char* cat_name(Cat c);
/// Colour of a category in summary rows: the detailed view's (see summary_forward_colour).
std::string summary_colour(Cat c, int layers);
/// "ranks a-b", or "rank a" for a bucket of one.
std::string bucket_name(const char* singular, int a, int b);

/// Where the summary rows go.
struct SummaryLayout {
  double x0 = 0;        ///< left edge of the time area, px
  double time_w = 0;    ///< width of the time area, px
  double secs = 1;      ///< seconds the time area spans
  double rows_top = 0;  ///< top of the first row, px
  double row_h = 0;     ///< height of a row, px
  int per_row = 1;      ///< ranks per row
  double bin_px = 5;    ///< width of a time bin, px
};

/// Draws every row's outline (titled with its timed-op count) and stacked category shares per time bin. A
/// run of bins with equal columns is one rectangle per segment; each category's segments in a row are one
/// <path class="share"> with one tooltip. TP collectives stack in magenta between the other collectives and
/// send/recv (no TP: no such segment, nothing else changes). With `cost`, the TP communication inside a
/// compute op (timeline_tp_inside.h: the last tp_inside of its time) counts as TP collective time, the rest as
/// the op's own category.
void draw_summary_rows(Svg& svg, const Trace& trace, const SummaryLayout& layout, int layers,
                       const CostModel* cost = nullptr);

}  // namespace trainsim::visualize
