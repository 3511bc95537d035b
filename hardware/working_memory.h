// What an op holds beyond what is resident when it starts: the memory a prediction of a device allocator's
// peak adds to the simulator's samples, which are taken as each op starts (docs/executor.md §4). For trainsim's
// executor (exec/model.cpp: eager attention, Attention::Eager) in its element size e (activation_bytes), per op of `n` tokens on a TP slice of t
// (h the hidden size, f = ffn/t, q = heads·head_dim/t the attention width, a = heads/t, s the sequence length):
//
// - its outputs (the tensors it writes, at their wire size: TensorSizes::wire_bytes), allocated as it starts;
// - a forward: nothing more without recomputation or with selective (the saved activations are counted with its
//   input from the start: TensorSizes::resident_bytes); with full recomputation, one block's saved activations
//   beyond its input while that block runs, e·n·(activation_bytes_per_block(None) / (e·s·b) − h) (its
//   probabilities included);
// - a backward (both halves, block by block from the last, as exec/model.cpp layer_backward runs it), at its
//   largest point, in the first block it runs (when every block's saved activations are still held): the grad of
//   the block's input e·n·h (unless that is the op's output), the grads the weight-gradient GEMMs read (the
//   FFN's 2f, its norm's input grad and the residual's, 2h) and the attention's temporaries (the output grads'
//   heads, the scores' grads e·n·a·s, q and k's grads): e·n·(3h + 2f + 3q + max(a·s, 3q, h)); selective
//   recomputation adds the recomputed probabilities e·n·a·s; full recomputation the block's recomputed saved
//   activations e·n·(3h + 4q + 3f + a·s); a layer with the LM head runs the head first (2·e·n·h: the grads of its
//   input and of the final norm's) and frees its saved inputs (2·e·n·h) before the blocks;
// - a backward-input (zero bubble's B) the same as a backward; its output grads kept for the backward-weight are
//   not counted once it ends (the simulator's samples do not hold them: a known underestimate between B and W);
// - the loss: the targets (4 bytes per token); a reduce-scatter whose input is not k equal pieces: the input
//   padded to k·ceil(P/k) elements (NCCL's reduce-scatter takes equal pieces); other ops: nothing.
// This is trainsim's own executor, op by op, for its replays' memory prediction (schedules/memory_breakdown.h).
// The simulators' samples count a coarser workspace meant for PyTorch training stacks at scale, the loss's fp32
// log-softmax and full recomputation's block only (TensorSizes::workspace_bytes, docs/hardware-model.md §3).
#pragma once

#include "hardware/memory.h"
#include "hardware/setting.h"
#include "sim/op.h"

namespace trainsim::hw {

/// Bytes `op` holds at its own peak beyond the tensors resident when it starts (its outputs at their wire size
/// included), on the setting `s` whose schedule tensors `sizes` measures; `group_size` the members of a
/// collective's group. See the header comment for the formula and its sources.
double op_working_bytes(const HardwareSetting& s, const TensorSizes& sizes, const Op& op, int group_size);

/// The part of op_working_bytes that is not the op's outputs: its temporaries and recomputed activations.
double op_temporary_bytes(const HardwareSetting& s, const TensorSizes& sizes, const Op& op, int group_size);

}  // namespace trainsim::hw
