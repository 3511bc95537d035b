// The schedule IR (DESIGN §3): a header and one Op list per rank. Schedules are data: generators make
// them, the text format and PyTorch's CSV carry them, the simulator validates and times them, and the
// executor replays them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hardware/setting.h"
#include "sim/op.h"
#include "sim/world.h"

namespace trainsim {

/// Everything about a schedule that is not an op.
struct ScheduleHeader {
  int version = 1;          ///< format version of the .sched file
  int world_size = 1;       ///< number of ranks
  int layers = 1;           ///< layers (or pipeline stages, one "layer" each) of the model
  int microbatches = 1;     ///< batches (microbatches) of one training step
  std::string cost_model = "puzzle";  ///< cost model the schedule is timed with: "puzzle", "unit" or "hardware"
  /// The `cost_model hardware` block: model, device, network and training shape (set iff cost_model is
  /// "hardware").
  std::optional<hw::HardwareSetting> hardware;
  P2PMode p2p = P2PMode::OneSlotPerDestination;  ///< buffering of sends
  /// Rank that owns each layer's stage (size `layers`), or empty when every rank runs every layer
  /// (data parallel). Informational for pipeline schedules; the CSV converter uses it.
  std::vector<int> stage_map;
  /// Collective groups 1, 2, ... (group 0, every rank, is implicit). Members in shard order.
  std::vector<std::vector<int>> groups;

  friend bool operator==(const ScheduleHeader&, const ScheduleHeader&) = default;
};

/// A whole schedule.
struct Schedule {
  ScheduleHeader header;
  std::vector<std::vector<Op>> ranks;  ///< ranks[r] = rank r's ops in program order; Op::rank == r

  /// Number of ops over all ranks.
  std::size_t op_count() const {
    std::size_t n = 0;
    for (const auto& ops : ranks) n += ops.size();
    return n;
  }
};

}  // namespace trainsim
