// PyTorch pipelining's schedule CSV (docs/pytorch-csv.md): one row per rank, one action per cell.
#pragma once

#include <string>

#include "schedules/schedule.h"

namespace trainsim {

/// Which actions the CSV holds.
enum class CsvForm {
  ComputeOnly,      ///< F, B, I, W only
  ComputeComms,     ///< also SEND_F/RECV_F/SEND_B/RECV_B, UNSHARD, RESHARD, REDUCE_GRAD
};

/// The rank of `stage` in V style over `ranks` ranks, as PyTorch's generate_stage_to_rank_mapping(style="v")
/// places stages: down the ranks, back up, down again (stage s on rank s % ranks in even sweeps, on
/// ranks - 1 - s % ranks in odd ones): 0,1,2,3,3,2,1,0,0,1,... for 4 ranks. Two stages per rank is the V
/// of ZBV and DualPipeV; more sweep on.
int v_style_rank(int stage, int ranks);

/// Writes `schedule` as PyTorch CSV. Throws std::invalid_argument when the schedule has no stage map, runs a
/// stage's compute on a rank other than the stage map's (a replicated or sharded stage), or has an op a CSV
/// action cannot hold (several microbatches, a tensor sent that is not between two stages, ...).
std::string export_pytorch_csv(const Schedule& schedule, CsvForm form);

/// Reads PyTorch CSV into a schedule: for a compute-only CSV, sends and receives are inserted (and the
/// result validates); a compute+comms CSV keeps its own. Loads, losses, frees, grad accumulation and
/// updates are added either way. `stage_map` gives the rank of each
/// stage; empty to infer it (loop or V style) from the rows. Throws std::invalid_argument naming the
/// row (rank), column and cell of a bad action.
Schedule import_pytorch_csv(const std::string& csv, int microbatches = 0, std::vector<int> stage_map = {},
                            const std::string& source = "<csv>");

}  // namespace trainsim
