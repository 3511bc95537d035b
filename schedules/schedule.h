// The schedule IR (DESIGN §3): a header and one Op list per rank. Schedules are data: generators make
// them, the text format and PyTorch's CSV carry them, the simulator validates and times them, and the
// executor replays them.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "hardware/setting.h"
#include "hardware/stage_layout.h"
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
  /// The blocks each layer holds, the embedding on layer 0 and the LM head on the last (hardware/stage_layout.h,
  /// the `layout` line: Megatron-LM's --pipeline-model-parallel-layout), one stage per layer; none: the even split.
  /// The hardware cost model and the executor split the model so.
  std::optional<hw::StageLayout> layout;
  /// Collective groups 1, 2, ... (group 0, every rank, is implicit). Members in shard order.
  std::vector<std::vector<int>> groups;
  /// Names of groups 1, 2, ... (version 2; empty when no group has a name, else one per group up to the last
  /// named one, "" for an unnamed group), e.g. "tp0",
  /// "dp3". A group whose name is "tp" or starts with "tp" and a non-letter is a TP group (is_tp_group_name).
  std::vector<std::string> group_names;
  /// Mixture of Experts: the relative token load of each expert slice j of the schedule's EP degree (the
  /// `expert_load` line, version 3), e.g. {1.5, 0.5}: slice 0 gets three times slice 1's tokens; empty: balanced.
  /// Loads are relative (the cost models divide by their mean), finite and above 0. Measured router statistics
  /// give them; `gen ep --expert-load` or `--moe-imbalance` writes them (docs/schedule-format.md).
  std::vector<double> expert_load;

  friend bool operator==(const ScheduleHeader&, const ScheduleHeader&) = default;
};

/// True for the name of a TP group: "tp", or "tp" followed by a character that is not a letter ("tp0",
/// "tp_s1_d2", "tp.3"). Generators name their TP groups so; the executor and the hardware cost model run a
/// layer's TP communication inside its compute ops over the rank's TP group.
bool is_tp_group_name(std::string_view name);

/// Raised by tp_groups_by_rank when two TP groups hold one rank; `first` < `second` are the two group ids
/// (1-based, as ops name groups), `second` the later in the header, where a parser points its error.
struct TpGroupConflict : std::invalid_argument {
  TpGroupConflict(const std::string& what, int rank, int first, int second)
      : std::invalid_argument(what), rank(rank), first(first), second(second) {}
  int rank, first, second;
};

/// Each rank's TP group, in one pass over the header's groups: element r is the id (1-based, as ops name
/// groups) of the group named tp... (is_tp_group_name) that holds rank r, 0 when none does; size world_size
/// (members outside 0..world_size-1 are skipped). Throws TpGroupConflict (a std::invalid_argument: "rank R is
/// in two TP groups, G1 ('tp0') and G2 ('tp1')") when two TP groups hold a rank.
std::vector<int> tp_groups_by_rank(const ScheduleHeader& h);

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
