// The hardware cost model's prediction of each rank's peak memory, as a device allocator counts it (every
// buffer, at any instant; docs/executor.md §4), split as the learning material's memory tables split it:
// parameters, gradients, optimizer state, activations (with what each forward saves for its backward) and the
// working memory inside ops.
//
// Each rank's ops are walked in program order: before an op, the tensors resident (the cost model's bytes:
// TensorSizes::resident_bytes, the saved activations with a forward's input), by kind; at the op, what it holds
// beyond them at its own peak (its outputs at their wire size and its temporaries: hardware/working_memory.h).
// The rank's peak is the largest such total over its ops (a free allocates nothing). Program order is the order a rank with one stream
// runs its ops in; with several streams (FSDP's prefetching all-gathers on a communication stream) the order in
// time may hold a little more or less at once.
#pragma once

#include <string>
#include <vector>

#include "hardware/cost_model.h"
#include "schedules/schedule.h"

namespace trainsim {

/// One rank's memory at its predicted peak, in bytes.
struct MemoryBreakdown {
  double weights = 0;      ///< W: parameters (full, a shard, or a TP slice)
  double grads = 0;        ///< dW: weight gradients
  double optimizer = 0;    ///< O: AdamW's moments (and master weights where the model has them)
  double activations = 0;  ///< A and dA, with the saved activations of the forwards whose inputs are held
  double working = 0;      ///< the op's temporaries (hardware/working_memory.h)
  std::string op;          ///< the op at the peak ("backward layer 3 batches {0} (p.sched:20)")
  double total() const { return weights + grads + optimizer + activations + working; }
};

/// The predicted peak of every rank of `schedule` under `cost` (prepared for every rank: the cost model of a
/// simulate_hardware run). Throws std::invalid_argument for a tensor the cost model cannot size.
std::vector<MemoryBreakdown> predicted_peak_memory(const Schedule& schedule, const hw::HardwareCostModel& cost);

}  // namespace trainsim
