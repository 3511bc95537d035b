// The tensors an op reads and writes when a schedule does not spell them out (DESIGN §1 algebra).
// The text format omits reads/writes equal to these defaults, and generators build ops with them.
#pragma once

#include <optional>
#include <vector>

#include "sim/op.h"

namespace trainsim {

/// Default reads of a compute op of `kind` on `layer` for `batches` in a model of `layers` layers, or
/// nullopt when the kind has no default (load, free, accumulate, send, recv, collectives):
///   forward l b          reads A_l{b} W_l                writes A_{l+1}{b}
///   backward l b         reads A_l{b} dA_{l+1}{b} W_l    writes dW_l{b} dA_l{b}
///   backward-input l b   reads A_l{b} dA_{l+1}{b} W_l    writes dA_l{b}
///   backward-weight l b  reads A_l{b} dA_{l+1}{b}        writes dW_l{b}
///   loss b (layer L)     reads A_L{b}                    writes dA_L{b}
///   update l             reads dW_l{all batches} W_l O_l writes W_l@1 O_l@1 (given reads: the optimizer
///                        state's shards of the weight, one step later; see updated_weight())
/// Weights are unsharded (W_l); `microbatches` gives "all batches" for update.
std::optional<TensorList> default_reads(const Op& op, int layers, int microbatches);
/// Default writes, as above.
std::optional<TensorList> default_writes(const Op& op, int layers, int microbatches);
/// Fills op.reads / op.writes with the defaults where they are empty and a default exists.
void fill_defaults(Op& op, int layers, int microbatches);

/// A compute op with its default tensors (forward, backward, backward-input, backward-weight, loss, update).
Op compute(OpKind kind, int rank, int layer, IdSet batches, int layers, int microbatches);

}  // namespace trainsim
