// TP communication inside compute ops, as the timeline draws it. Under the hardware cost model a compute op on a
// TP slice runs its layer's TP collectives inside itself (CostModel::inner_comm, hardware/cost_model.h
// tp_comm_seconds): part of its duration in which the rank's compute waits on its TP group, so exposed. The
// detailed timeline draws it as a magenta band along the bottom of the op's box, as long as that time, ending
// at the op's end (the length is the figure; the collectives themselves are spread over the op), with the
// seconds in the op's tooltip; summary rows count it as TP collective time; the heading gives the totals.
#pragma once

#include <string>

#include "sim/cost_model.h"
#include "sim/trace.h"
#include "visualize/svg_writer.h"

namespace trainsim::visualize {

/// The TP communication inside the run's op (`cost`->inner_comm), clamped to the op's duration; 0 without a
/// cost model, for ops that take no time and for every op of a model without TP.
Time tp_inside(const CostModel* cost, const OpRun& run);

/// True when some op of the trace has TP communication inside it (tp_inside > 0).
bool has_tp_inside(const Trace& trace, const CostModel* cost);

/// The tooltip's line for an op with TP communication inside (tp_inside > 0): "TP communication inside:
/// 1.2 ms (25% of the op; magenta band)"; "" for none. `real`: lengths as time_text words them.
std::string tp_inside_line(const CostModel* cost, const OpRun& run, bool real);

/// The heading's line: "TP communication inside compute ops (magenta band at the end of each op, exposed: its
/// compute waits): mean 1.2 ms per rank (3.4% of the step time), most 1.5 ms on rank 2"; "" when no op has any.
std::string tp_inside_heading(const Trace& trace, const CostModel* cost, bool real);

/// Draws the band of an op whose box spans [x, x + w] x [top, top + h] and which runs `inside` of its
/// `duration` in TP communication: a <rect class="tp-inside"> at the box's bottom right, w * inside / duration
/// wide (at least 0.5 px), a third of the box high (at least 2 px), no tooltip of its own (the box has it).
void draw_tp_inside_band(Svg& svg, double x, double w, double top, double h, Time inside, Time duration);

}  // namespace trainsim::visualize
