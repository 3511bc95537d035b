// The whole-schedule check of updates (DESIGN §1): every layer is updated exactly once, over all its shards.
// The op algebra (sim/algebra.h) checks each update alone; this checks them together, after a simulation.
#pragma once

#include <span>

#include "sim/op.h"

namespace trainsim {

/// Checks that `updates` (every Update op of a schedule of `layers` layers, in rank and program order)
/// update each layer once (each writes step 1) and together cover all its shards. Throws SimError naming
/// the first op updated twice, a layer's shards never updated, or a layer never updated. Each update must
/// write its weight first (the algebra's order). O(updates log updates): a 100-byte file may declare a
/// million layers.
void check_updates(std::span<const Op* const> updates, int layers);

}  // namespace trainsim
