// The cost model a schedule is timed with, built from its header: `puzzle` by name, `unit` scaled by the
// stage map (sim/cost_model.h: a stage's share of the model costs one second per batch, a layer
// stages/layers of it), `hardware` from the header's hardware block (hardware/cost_model.h) and the
// schedule's groups and layer placement.
#pragma once

#include <memory>

#include "schedules/rank_source.h"
#include "schedules/schedule.h"
#include "sim/cost_model.h"

namespace trainsim {

/// Throws std::invalid_argument for an unknown cost model, a `hardware` header without its block, a model
/// with fewer blocks than the schedule has layers, or (hardware) a compute op on a TP slice of t whose rank has
/// no TP group of t ranks (naming the rank, the op and its file:line). Under the hardware model a rank runs
/// sequence parallelism when it reduce-scatters or all-gathers an activation or activation grad over its TP
/// group (hardware/cost_model.h, TpLayout).
std::unique_ptr<CostModel> make_schedule_cost_model(const Schedule& schedule);
/// The same for a schedule read one rank at a time. The hardware model learns what each rank runs from the rank's
/// ops (CostModel::prepare_rank): here, for a source that holds every rank's ops; for one that makes them when
/// asked, the stream engine prepares each rank as it issues it (so the error above comes from the simulation).
std::unique_ptr<CostModel> make_schedule_cost_model(const RankSource& source);

}  // namespace trainsim
