// Tensor parallelism's communication in one pass of a schedule layer: which collectives the pass runs (Megatron-LM's
// f and g operators, Shoeybi et al. 2019 fig. 3; with sequence parallelism the all-gathers and reduce-scatters of
// Korthikanti et al. 2022 §4.2.2), the GEMM each can run under, and how much of each stays exposed under the
// framework's TP overlap (HardwareSetting::tp_overlap). The one place that knows this: the cost model prices
// the TP collectives inside compute ops and the schedule's explicit ones from it.
//
// Per block and microbatch, each sublayer (attention, MLP) has an input group of column-parallel linears (QKV;
// the MLP's first, gate and up) and one row-parallel output linear (the attention's output projection; the MLP's
// down projection):
// - forward: without SP one all-reduce after the output linear; with SP an all-gather before the input group
//   and a reduce-scatter after the output linear;
// - input-grad pass: without SP one all-reduce of the input group's input grad; with SP an all-gather of the
//   output linear's output grad (the reduce-scatter's conjugate), the input group's input all-gathered again for
//   its weight grad (Megatron-LM keeps only the sequence shard), and a reduce-scatter of its input grad;
// - the embedding (vocabulary-parallel) reduces its output (all-reduce; SP: reduce-scatter) and with SP
//   all-gathers that grad in the backward; the LM head (column-parallel) has the input group's collectives;
// - full recomputation runs the forward's collectives again in the backward; the weight-grad pass of a split
//   backward (zero bubble's W) runs none inside: it uses what its B pass and the schedule's gathers give it.
// Each moves the b·s·h activations of the microbatch (b·s/t·h per rank and step of the ring).
//
// Overlap (what each collective can run under; the time it leaves exposed is max(0, C - G) for a collective of C
// seconds under a GEMM of G seconds, else C: interference between the two is not modelled, docs/hardware-model.md
// §6):
// - none: every TP collective synchronous (torchtitan's TP without async TP: DTensor's collectives are waited
//   for before the next op);
// - backward (Megatron-LM's default, and trainsim's): the input-grad pass's reduction of each input group's input
//   grad runs under that group's weight-grad GEMM (megatron/core/tensor_parallel/layers.py,
//   LinearWithGradAccumulationAndAsyncCommunication: the all-reduce, or with SP the reduce-scatter, is issued
//   asynchronously before the weight-grad GEMM), and with SP the re-gather of its input under its input-grad GEMM;
//   a pass without the weight grad (zero bubble's B) has nothing to run the reduction under;
// - full (Megatron-LM's --tp-comm-overlap with TransformerEngine's userbuffers; torchtitan's async TP, Wang et al.
//   2022's decomposition): with sequence parallelism every all-gather runs under the GEMM that consumes it and
//   every reduce-scatter under the GEMM that produces it, in the forward and the backward (both frameworks require
//   SP for it; without SP it is the backward mode).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hardware/comm.h"
#include "hardware/op_costs.h"
#include "hardware/setting.h"

namespace trainsim::hw {

/// Where a TP collective sits in a pass, for the schedule's explicit TP ops (docs/design.md, "Tensor
/// parallelism": the reduction a layer ends with is an explicit op; with SP so are the all-gathers of the whole
/// tensors a pass reads).
enum class TpRole : std::uint8_t {
  Inner,             ///< inside the layer: part of its compute op
  OutputReduce,      ///< forward: the reduction of the layer's output (unless it holds the LM head)
  InputGather,       ///< SP: the all-gather of the layer's input (forward), or again for its weight grad (backward)
  OutputGradGather,  ///< SP backward: the all-gather of the grad of the layer's output (unless it holds the head)
  InputGradReduce,   ///< backward: the reduction of the layer's input grad (unless it holds the embedding)
};

/// One TP collective of a pass, per microbatch: of b·s·h activation bytes.
struct TpCollectiveSpec {
  Collective kind = Collective::AllReduce;  ///< AllReduce, AllGather or ReduceScatter
  TpRole role = TpRole::Inner;
  double partner_s = 0;     ///< seconds of the GEMM it can run under (0: none)
  bool overlapped = false;  ///< whether the setting's TP overlap runs it under that GEMM
};

/// The TP collectives of pass `kind` (Forward, Backward, BackwardInput or BackwardWeight; none for other kinds) of
/// `layer` over `tokens` tokens at TP split `tp` (degree above 1), in the order the pass runs them, with their
/// partner GEMMs on the setting's device and the overlap the setting's tp_overlap gives them (see the header
/// comment; TpOverlap::Full without sequence parallelism is the backward mode). `experts_inside`: the layer's MoE
/// blocks run every expert on the rank (EP 1), each split over the TP group (Megatron-Core's expert TP equal to TP
/// without EP, torchtitan's TensorParallel of the experts): their MLP sublayer gathers its input and reduces its
/// output as a dense MLP does; otherwise their routed experts are beside expert parallelism and take no TP collective.
std::vector<TpCollectiveSpec> tp_pass_collectives(const HardwareSetting& s, const LayerContent& layer, OpKind kind,
                                                  double tokens, TpSplit tp, bool experts_inside = false);

/// The seconds a collective of `seconds` leaves exposed: max(0, seconds - partner_s) when overlapped, else all.
double tp_exposed_seconds(const TpCollectiveSpec& c, double seconds);

/// The TP collectives a compute op runs inside itself (see the header comment), per microbatch: every collective
/// of its pass but the roles the schedule runs as explicit ops. Without sequence parallelism all-reduces, with it
/// all-gathers and reduce-scatters. Counts for tests and documentation; the cost model times the same list.
struct TpCollectives {
  int all_reduces = 0;
  int all_gathers = 0;
  int reduce_scatters = 0;
  /// Equal when every count is.
  friend bool operator==(const TpCollectives&, const TpCollectives&) = default;
};
/// Which roles a pass's explicit ops take: by the design's rule the reductions at the layer's ends (the output's
/// unless the layer holds the head, the input grad's unless it holds the embedding), and with SP one all-gather
/// for each whole input the schedule gathers for the pass (`gathered_input`: the layer's input; `gathered_grad`:
/// its output's grad).
struct TpExplicit {
  bool gathered_input = false;
  bool gathered_grad = false;
};
/// True when the schedule runs the collective of role `role` of `layer`'s pass `kind` as an explicit op.
bool tp_role_explicit(TpRole role, const LayerContent& layer, OpKind kind, TpExplicit e);
/// The counts of the collectives inside a compute op of `layer` (tp_pass_collectives less the explicit roles),
/// with recomputation `r` and sequence parallelism `sequence_parallel` (their overlap does not change them).
TpCollectives tp_collectives_inside(const LayerContent& layer, OpKind kind, Recompute r, bool sequence_parallel,
                                    TpExplicit e = {});

}  // namespace trainsim::hw
