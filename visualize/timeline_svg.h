// Timeline SVG of a simulated run (DESIGN §4): a row per rank with ops as boxes at their times, a memory
// lane per rank with the peak marked, a time axis and a legend.
//
// Up to `max_detailed_ranks` ranks every timed op is a box with a tooltip (<title>): forward in its layer's
// colour, backward lighter (backward-input "I" and backward-weight "W" in two more tints), update yellow,
// all-gather, reduce-scatter and all-reduce in their own colours (blues and violets), send/recv grey, loss a
// thin dark marker. Every box's label starts with its layer ("L2 0 1 2 3": layer 2, batches 0-3; "L2 AR"); the
// legend explains the labels. Load, accumulate and free are not drawn. Ops narrower than `merge_below_px` are
// merged with their narrow neighbours into one box whose tooltip counts them.
//
// With more ranks, ranks are bucketed into at most `max_detailed_ranks` rows ("ranks a-b"); each row is cut
// into time bins of `summary_bin_px` pixels, and each bin stacks the shares of the row's rank-time in each op
// category (forward, backward, update, collective, TP collective, pass) in the detailed view's colours. The row's memory lane
// plots the highest memory of its ranks in each bin.
//
// Exposed communication (sim/exposed_comm.h: a rank's communication running while none of its compute runs)
// is marked when the trace poses the question (marks_exposed_comm: not under the puzzle model, and some
// communication takes time): a red-orange strip (<rect class="exposed">, titled with its span and length)
// along the bottom of the rank's row over each exposed interval (intervals less than a pixel apart share one
// strip), the row's total in seconds in the right margin ("exposed 0.5 s"; a bucket of ranks: its mean), the
// mean and the most over ranks in the heading, and a legend entry. Summarised rows get the totals only.
//
// Tensor parallelism: TP collectives (sim/tp_ops.h) are magenta, in the detailed boxes and as a category of
// their own in summary rows, each with a legend entry only when drawn. Given the cost model
// (TimelineOptions::cost), the TP communication a compute op runs inside itself is a magenta band along the
// bottom of its box, ending at its end, as long as that time (timeline_tp_inside.h).
//
// Memory lanes start at t=0 (what the first op finds was held from the start); the peak is marked where its
// value is held longest, labelled in a band above its lane (never over the curve); above
// `memory_heatmap_above` rows each lane is a heatmap strip. A trace in real seconds and bytes (hardware model,
// measured replay) is worded so (timeline_units.h): "step time 12.2 s", "91.1 MiB"; the puzzle and unit
// models keep "Timesteps" and plain units. A failed run
// (`error`) gets a banner and its blocked ranks are marked; the time target's line can follow the floor rule.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/cost_model.h"
#include "sim/trace.h"

namespace trainsim::visualize {

/// A rank left waiting when a failed run stopped: its row is marked from `since` on.
struct BlockedMark {
  int rank = 0;
  Time since = 0;
  std::string what;  ///< the op it waits in and what for (the marker's tooltip)
  int stream = 0;    ///< the stream it waits on: the mark goes on that stream's sub-row of the rank
};

/// What was resident on the peak rank at the peak: the peak marker's tooltip and the caption under the lanes.
struct PeakExplanation {
  std::string op;  ///< the op that started at the peak ("forward layer 2 batches {0-3} (ddp.cpp:20)")
  std::vector<std::pair<std::string, double>> resident;  ///< each tensor and its size (cost model unit)
};

/// What to draw besides the trace.
struct TimelineOptions {
  std::string title;                     ///< heading line, e.g. "ddp - Puzzle 2 - Distributed Data Parallel"
  std::optional<double> target_time;     ///< drawn as a marker on the time axis (seconds / steps)
  std::optional<double> target_memory;   ///< drawn as a line in each memory lane (cost model unit)
  int max_detailed_ranks = 64;           ///< above this many ranks, rows are summarised
  double max_time_width = 2400;          ///< widest time area, pixels
  double min_time_width = 900;           ///< narrowest time area, pixels
  double px_per_second = 40;             ///< preferred scale (one puzzle step = one second) within those bounds
  double merge_below_px = 1.0;           ///< ops narrower than this are merged into one box with their neighbours
  double summary_bin_px = 5;             ///< width of a time bin in summarised rows, pixels
  /// The time target is met when floor(Timesteps) <= target (the puzzles' rule): the target line is drawn at
  /// the boundary target + 1, labelled so. Otherwise at the target itself.
  bool target_time_floor = false;
  /// The run failed with this error: a red banner at the top shows its first lines and the title says so.
  std::string error;
  /// Ranks left waiting (a deadlock, or another rank's error), in rank order, each marked on its stream's
  /// sub-row (a row of several ranks: its first).
  std::vector<BlockedMark> blocked;
  std::optional<PeakExplanation> peak_explanation;  ///< what made the peak: tooltip; caption when over target_memory
  int memory_heatmap_above = 32;  ///< with more memory rows than this, each is a heatmap strip, not a plot
  /// A measured replay: each rank's device allocator peak over the run, bytes (`trainsim replay`'s "measured"
  /// figure); the heading names the highest beside the lanes' peak, which samples the allocator only as each
  /// op starts. Empty: not shown.
  std::vector<double> allocator_peak;
  /// The cost model that timed the trace, or null. With the hardware model's tensor parallelism, a compute op's
  /// inner_comm (the TP collectives inside it) is drawn as a magenta band in its box, its seconds in the op's
  /// tooltip, its totals in the heading, and summary rows count it as TP collective time
  /// (timeline_tp_inside.h). Null, or a model without TP: nothing of it is drawn.
  const CostModel* cost = nullptr;
  /// What a row is: "rank" (row r is rank r), or "stage" where each row is one representative rank of a pipeline
  /// stage (trainsim plan's timelines). Names the rows and the peak's row in the heading.
  std::string row_name = "rank";
};

/// The SVG document (UTF-8 text). Deterministic: the same trace and options give the same bytes.
std::string timeline_svg(const Trace& trace, const TimelineOptions& options = {});

}  // namespace trainsim::visualize
