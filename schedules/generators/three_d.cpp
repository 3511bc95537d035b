// Tensor parallelism (Shoeybi et al. 2019, Megatron-LM) alone and in 3D parallelism (Narayanan et al. 2021,
// PTD-P): the semantics are docs/design.md's "Tensor parallelism: slices and partial sums"; build_pipeline
// makes the ops (builder.h, PipelinePlan).
//
// gen 3d: T x P x D ranks, rank = tp + T * (dp + D * pp): TP fastest, so a TP group is T consecutive ranks
// (inside a node), then data parallel, then pipeline stages: Megatron-LM's order (its RankGenerator's
// "tp-dp-pp" default) and torchtitan's device mesh ["pp", "dp", "tp"]. Each pipeline (a dp index and a tp
// index) runs the stage order of gen 1f1b, interleaved-1f1b, zb-h1, zbv, dualpipev or interleaved-zb on its
// replica's M microbatches (replica d: batches d*M .. d*M+M-1), each stage chunk holding L / (P x V) consecutive
// layers, or with GenOptions::chunk_blocks one layer per transformer block of the chunk (refine_layers: a chunk's
// forward runs its layers up, its backward down, as Megatron-LM runs a chunk's blocks); activations and their
// grads go between the ranks of neighbouring stages with the same tp and dp index. The TP groups (header
// groups tp0, tp1, ...: tp<k> holds ranks T*k .. T*k+T-1) reduce on the compute stream; the data-parallel
// groups (dp<k>, k = tp + T * pp, in dp order) on communication stream 1, where DDP and FSDP overlap them
// with the backward: plain DDP (all-reduce of each slice's grads), --zero 1 (as gen zero1) or --zero 3 (FSDP
// of each TP slice, W_l<j/T>[d/D], gathered before the first pass and kept until the layer's last backward,
// torchtitan's reshard_after_forward=False under pipelining; the grads reduce-scattered).
//
// gen 3d --cp C: context parallelism. Ranks T x C x D x P, rank = tp + T * (cp + C * (dp + D * pp)): CP next to TP,
// as Megatron-LM's default rank order "tp-cp-ep-dp-pp" and torchtitan's mesh ["pp", "dp_replicate", "dp_shard",
// "cp", "tp"] place it, so a CP group (header groups cp0, cp1, ...: ranks tp + T * (c + C * k), c = 0..C-1) sits in
// a node when T x C fits. Each CP rank runs the pipeline's order on its own microbatch ids, as a data-parallel
// replica would: the schedule is the one of --dp D x C, and the hardware setting's context_parallel (set by gen
// --cp) makes each op work on 1/C of every sequence's tokens with ring attention over its CP group
// (hardware/op_costs.h). The data-parallel groups dp<k> hold all D x C replicas: grads are reduced over DP x CP,
// as both frameworks do.
//
// gen 3d --ep E: expert parallelism inside each stage (add_expert_parallel below; docs/design.md, "Mixture of
// Experts"): the layers from --dense-layers on are MoE layers whose experts are split over EP groups of E
// consecutive ranks of the stage's TP x DP ranks; the pipeline builder writes each MoE layer's dispatch, experts and
// combine (PipelinePlan::ep). Every pipeline order (a split backward runs the experts' whole backward in the
// input-grad pass), DDP, ZeRO-1 or FSDP, TP beside it (expert TP 1, with --sp), CP (EP groups of consecutive ranks
// of the stage's TP x CP x DP ranks: each CP rank routes the tokens of its chunk of the sequences), --a2a-overlap.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "hardware/stage_layout.h"
#include "schedules/generators/builder.h"

namespace trainsim::gen {

PipelinePlan replicate_pipeline(const PipelinePlan& order, int T, int C, int D, bool sequence_parallel, DpMode mode) {
  const int P = order.world_size, M = order.microbatches;
  PipelinePlan plan;
  plan.world_size = P * D;  // plan rank d + D * s: the TP group of stage s, replica d
  plan.layers = order.layers;
  plan.microbatches = M * D;
  plan.tp = T;
  plan.sequence_parallel = sequence_parallel;
  plan.dp = D;
  plan.dp_mode = mode;
  plan.dp_stream = 1;
  plan.step_at_end = true;  // Megatron-LM's optimizer step follows the whole pipeline's backward
  // Every replica runs the one pipeline's order on its own microbatches (replica d: d*M .. d*M+M-1) as plan
  // rank d + D * s: PipelinePlan::replicas, so that the plan-wide work is done for one replica.
  plan.replicas = D;
  plan.steps = order.steps;
  for (int s : order.stage_map) plan.stage_map.push_back(T * D * s);
  // Header groups: the TP groups, the CP groups, then the data-parallel groups.
  if (T > 1)
    for (int k = 0; k < P * D; ++k) {
      std::vector<int> members;
      for (int j = 0; j < T; ++j) members.push_back(j + T * k);
      plan.groups.push_back(std::move(members));
      plan.group_names.push_back(fmt::format("tp{}", k));
      plan.tp_group.push_back(static_cast<int>(plan.groups.size()));
    }
  if (C > 1)
    for (int k = 0; k < P * D / C; ++k)
      for (int j = 0; j < T; ++j) {
        std::vector<int> members;
        for (int c = 0; c < C; ++c) members.push_back(j + T * (c + C * k));
        plan.groups.push_back(std::move(members));
        plan.group_names.push_back(fmt::format("cp{}", j + T * k));
      }
  if (D > 1) {
    plan.shard_index.resize(static_cast<std::size_t>(T) * P * D);
    plan.group_of.resize(plan.shard_index.size());
    for (int s = 0; s < P; ++s)
      for (int j = 0; j < T; ++j) {
        std::vector<int> members;
        for (int d = 0; d < D; ++d) {
          const int rank = j + T * (d + D * s);
          members.push_back(rank);
          plan.shard_index[rank] = d;
          plan.group_of[rank] = static_cast<int>(plan.groups.size()) + 1;
        }
        plan.groups.push_back(std::move(members));
        plan.group_names.push_back(fmt::format("dp{}", j + T * s));
      }
  }
  return plan;
}

namespace {

struct Shape {
  int tp, pp, dp, chunks, microbatches, cp;
  std::vector<int> layers_per_chunk;  // schedule layers of each stage chunk, in layer order
};

// Checks the options of `kind` (tp or 3d) and returns the shape they ask for.
Shape check_options(const std::string& kind, const GenOptions& o, int pp, int dp) {
  require_tp_degree(kind, o.tp);
  require_at_least(kind, "pp", pp, 1);
  require_at_least(kind, "dp", dp, 1);
  require_at_least(kind, "cp", o.cp, 1);
  require_at_least(kind, "microbatches", o.microbatches, 1);
  require_at_least(kind, "chunks", o.chunks, 1);
  require_at_least(kind, "layers", o.layers, 0);
  static const char* const kSchedules[] = {"1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev", "interleaved-zb"};
  if (std::find(std::begin(kSchedules), std::end(kSchedules), o.schedule) == std::end(kSchedules))
    throw std::invalid_argument(fmt::format(
        "{}: --schedule must be 1f1b, interleaved-1f1b, zb-h1, zbv, dualpipev or interleaved-zb (got '{}')", kind,
        o.schedule));
  if (o.zero != 0 && o.zero != 1 && o.zero != 3)
    throw std::invalid_argument(fmt::format(
        "{}: --zero must be 1 (ZeRO-1: optimizer state sharded) or 3 (FSDP of each TP slice); without it, plain "
        "data parallelism (got {})",
        kind, o.zero));
  const bool looped_chunks = interleaved_schedule(o.schedule);  // (looped-bfs is refused above)
  if (o.chunks > 1 && !looped_chunks && !(v_shaped_schedule(o.schedule) && o.chunks == 2))
    throw std::invalid_argument(fmt::format(
        "{}: --chunks {} goes with --schedule interleaved-1f1b or interleaved-zb (the {} order has {} per stage)", kind,
        o.chunks, o.schedule, v_shaped_schedule(o.schedule) ? "two chunks, in V placement," : "one chunk"));
  const int chunks = v_shaped_schedule(o.schedule) ? 2 : o.chunks;
  const int chunks_total = pp * chunks;  // both at most the limits: no overflow (checked in the registry)
  std::vector<int> per_chunk;
  if (!o.chunk_blocks.empty()) {
    if (o.layers != 0)
      throw std::invalid_argument(fmt::format("{}: give --layers or the blocks of each stage chunk, not both", kind));
    if (static_cast<int>(o.chunk_blocks.size()) != chunks_total)
      throw std::invalid_argument(fmt::format(
          "{}: the stage layout has {} stage chunks but the schedule has {} (--pp {} x {} chunks per stage)", kind,
          o.chunk_blocks.size(), chunks_total, pp, chunks));
    for (int b : o.chunk_blocks) {
      if (b < 0) throw std::invalid_argument(fmt::format("{}: a stage chunk cannot hold {} blocks", kind, b));
      per_chunk.push_back(std::max(b, 1));  // a chunk of the embedding or the head alone is one layer
    }
  } else {
    const int layers = o.layers != 0 ? o.layers : chunks_total == 1 ? 4 : chunks_total;
    if (layers % chunks_total != 0)
      throw std::invalid_argument(fmt::format(
          "{}: --layers {} does not split evenly into {} stage chunks (--pp {} x {} chunks per stage); choose a "
          "multiple of {}",
          kind, layers, chunks_total, pp, chunks, chunks_total));
    per_chunk.assign(chunks_total, layers / chunks_total);
  }
  return Shape{o.tp, pp, dp, chunks, o.microbatches, o.cp, std::move(per_chunk)};
}

// The order of one pipeline, one layer per stage chunk, on microbatches 0..M-1.
PipelinePlan pipeline_order(const std::string& kind, const std::string& schedule, int P, int V, int M) {
  if (schedule == "zb-h1") return plan_zb_h1(P, M);
  if (schedule == "interleaved-1f1b") return plan_interleaved_1f1b(kind, P, V, M);
  if (schedule == "interleaved-zb") return plan_interleaved_zb(kind, P, V, M);
  if (schedule == "zbv") return plan_zbv(P, M);
  if (schedule == "dualpipev") return plan_dualpipev(kind, "--pp", P, M);
  return plan_1f1b(P, M);
}

// gen 3d --ep E: expert parallelism over the TP x CP x DP ranks of each stage (Megatron-Core's folded layout: Liu et
// al. 2025, "MoE parallel folding"). Megatron-Core carves EP out of TP x CP x DP for the expert layers, the order
// "tp-cp-ep-dp-pp" for attention and "etp-ep-edp-pp" for the experts. A rank's index in its stage is f = tp index +
// T·d (schedule rank f + T·D·s; with CP, D counts the dp x cp replicas, d = cp index + C·dp index: Megatron-Core's
// expert ranks ignore the dense CP split); with expert TP degree Et (--etp: 1, or T) its expert coordinates are the
// expert-TP index f mod Et, the expert slice (f / Et) mod E and the expert-data-parallel index f / (Et·E).
// - Expert TP 1: an EP group is E consecutive ranks of a stage. With T > 1 the EP degree must be a multiple of T
//   (each EP group holds whole TP groups, so the experts see whole microbatches).
// - Expert TP T: an EP group holds TP index k of E consecutive TP groups (E must divide D); each expert slice is
//   split over the TP group, which all-gathers the tokens the dispatch gave and reduce-scatters the experts' output.
// Header groups ep<k> (stage s, then EDP index g, then expert-TP index i: the ranks i + Et·(g·E + q) + T·D·s of q <
// E) and, when E·Et < T·D, edp<k> (stage s, slice q, index i: those ranks of every g). With T > 1 sequence
// parallelism must be on (Megatron-LM requires it for MoE with TP): each TP rank routes its sequence shard of the
// tokens. Returns the slices' loads. Throws std::invalid_argument for what it does not model yet.
std::vector<double> add_expert_parallel(PipelinePlan& plan, const GenOptions& o, int P, int D, int layers) {
  const std::string kind = "3d";
  const int E = o.ep, T = o.tp, Et = o.etp;
  if (E > Tensor::kMaxEpSize)
    throw std::invalid_argument(fmt::format("{}: --ep must be at most {} (got {})", kind, Tensor::kMaxEpSize, E));
  if (Et != 1 && Et != T)
    throw std::invalid_argument(fmt::format("{}: --etp is 1 (the experts whole beside TP) or --tp ({}: each expert "
                                            "slice split over the TP group, Megatron-LM's default), not {}",
                                            kind, T, Et));
  if (T > 1 && !o.sequence_parallel)
    throw std::invalid_argument(fmt::format("{}: --ep with --tp {} needs --sp: Megatron-LM runs MoE layers under tensor "
                                            "parallelism with sequence parallelism only (each TP rank routes its "
                                            "sequence shard of the tokens)",
                                            kind, T));
  if (T > 1 && Et == 1 && E % T != 0)
    throw std::invalid_argument(fmt::format("{}: --ep {} must be a multiple of --tp {}: an EP group holds whole TP "
                                            "groups (or give --etp {}: each expert split over the TP group)",
                                            kind, E, T, T));
  if ((T * D) % (E * Et) != 0)
    throw std::invalid_argument(
        Et == 1 ? fmt::format("{}: --ep {} must divide --tp x --cp x --dp = {}: the EP groups are carved out of each "
                              "stage's tensor-, context- and data-parallel ranks",
                              kind, E, T * D)
                : fmt::format("{}: --ep {} must divide --cp x --dp = {}: with --etp {} an EP group holds one TP index of "
                              "--ep TP groups of a stage",
                              kind, E, D, Et));
  require_at_least(kind, "dense-layers", o.dense_layers, 0);
  if (o.dense_layers >= layers)
    throw std::invalid_argument(fmt::format("{}: --dense-layers {} leaves no MoE layer of the {} layers", kind,
                                            o.dense_layers, layers));
  std::vector<double> loads = expert_loads(kind, o, E);
  plan.ep = E;
  plan.etp = Et;
  plan.dense_layers = o.dense_layers;
  plan.a2a_overlap = o.a2a_overlap;
  const int stage = T * D, world = P * stage, replicas = stage / (E * Et);
  plan.ep_group.assign(world, 0);
  plan.edp_group.assign(world, 0);
  // The rank of stage s with expert-TP index i, expert slice q and expert-data-parallel index g.
  auto rank_of = [&](int s, int g, int q, int i) { return i + Et * (g * E + q) + stage * s; };
  // A header group `name` of `members`, recorded as each member's group in `of_rank`.
  auto add_group = [&](std::string name, std::vector<int> members, std::vector<int>& of_rank) {
    plan.groups.push_back(std::move(members));
    plan.group_names.push_back(std::move(name));
    for (int r : plan.groups.back()) of_rank[r] = static_cast<int>(plan.groups.size());
  };
  int named = 0;
  for (int s = 0; s < P; ++s)
    for (int g = 0; g < replicas; ++g)
      for (int i = 0; i < Et; ++i) {
        std::vector<int> members;
        for (int q = 0; q < E; ++q) members.push_back(rank_of(s, g, q, i));
        add_group(fmt::format("ep{}", named++), std::move(members), plan.ep_group);
      }
  named = 0;
  if (replicas > 1)
    for (int s = 0; s < P; ++s)
      for (int q = 0; q < E; ++q)
        for (int i = 0; i < Et; ++i) {
          std::vector<int> members;
          for (int g = 0; g < replicas; ++g) members.push_back(rank_of(s, g, q, i));
          add_group(fmt::format("edp{}", named++), std::move(members), plan.edp_group);
        }
  return loads;
}

std::unique_ptr<RankSource> build(const Shape& sh, const GenOptions& o) {
  // D counts every data-parallel replica: dp x cp (a CP rank is a replica with its own microbatch ids).
  const int T = sh.tp, P = sh.pp, C = sh.cp, D = sh.dp * sh.cp, M = sh.microbatches;
  // One pipeline's order, its stage chunks split into their schedule layers.
  const PipelinePlan order = refine_layers(pipeline_order("3d", o.schedule, P, sh.chunks, M), sh.layers_per_chunk);
  const DpMode mode = o.zero == 3 ? DpMode::Fsdp : o.zero == 1 ? DpMode::Zero1 : DpMode::Replicate;
  PipelinePlan plan = replicate_pipeline(order, T, C, D, o.sequence_parallel, mode);
  std::vector<int> blocks_per_layer;  // one layer per block: the header's layout says which layer holds which
  for (int b : o.chunk_blocks)
    if (b == 0) blocks_per_layer.push_back(0);
    else blocks_per_layer.insert(blocks_per_layer.end(), b, 1);
  std::vector<double> loads;
  if (o.a2a_overlap && o.ep <= 1)
    throw std::invalid_argument("3d: --a2a-overlap overlaps expert parallelism's all-to-alls: give --ep above 1");
  if (o.etp != 1 && o.ep <= 1)
    throw std::invalid_argument(fmt::format("3d: --etp {} splits the expert slices of expert parallelism: give --ep "
                                            "above 1 (without EP, --tp alone splits every expert over the TP group)",
                                            o.etp));
  if (o.ep > 1) {
    loads = add_expert_parallel(plan, o, P, D, order.layers);
    for (int b : blocks_per_layer) plan.blockless.push_back(b == 0);  // (the LM head's chunk alone: no experts)
  }
  auto source = build_pipeline(std::move(plan));
  if (o.ep > 1) source->header().version = 3, source->header().expert_load = std::move(loads);
  if (!o.chunk_blocks.empty()) {
    source->header().layout = hw::StageLayout(std::move(blocks_per_layer));
  }
  return source;
}

}  // namespace

std::unique_ptr<RankSource> gen_tp(const GenOptions& o) {
  GenOptions one = o;
  one.ep = 1;
  one.chunks = 1;
  one.cp = 1;
  one.schedule = "1f1b";
  one.chunk_blocks.clear();
  return build(check_options("tp", one, 1, 1), one);
}

std::unique_ptr<RankSource> gen_3d(const GenOptions& o) { return build(check_options("3d", o, o.pp, o.dp), o); }

}  // namespace trainsim::gen
