#include "hardware/cost_model.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "hardware/comm.h"
#include "hardware/experts.h"
#include "hardware/tp_comm.h"

namespace trainsim::hw {

HardwareCostModel::HardwareCostModel(HardwareSetting setting, int layers, int world_size,
                                     std::vector<std::vector<int>> groups, std::vector<std::string> group_names,
                                     std::vector<int> tp_group, const ModelPlacement& placement)
    : setting_(std::move(setting)),
      tied_offset_(setting_.model.tied_embeddings && layers > 1 && static_cast<int>(placement.stage_map.size()) == layers
                       ? placement.stage_map.back() - placement.stage_map.front()
                       : 0),
      sizes_(setting_, layers, placement.layout ? &*placement.layout : nullptr, tied_offset_ != 0),
      world_size_(world_size),
      groups_(std::move(groups)),
      group_names_(std::move(group_names)),
      forward_layers_(world_size, std::vector<char>(layers + 1, 0)) {
  shapes_.reserve(groups_.size());
  for (const auto& members : groups_) shapes_.push_back(setting_.network.shape_of(members));
  tp_.group = std::move(tp_group);
  if (!tp_.group.empty()) tp_.sequence_parallel.assign(world_size, 0);
  // Context parallelism: every rank in a CP group (a header group named cp...) of the setting's degree.
  const int c = setting_.context_parallel;
  if (c > 1) {
    cp_group_.assign(world_size, 0);
    for (std::size_t g = 1; g < groups_.size(); ++g)
      if (g - 1 < group_names_.size() && group_names_[g - 1].rfind("cp", 0) == 0)
        for (int r : groups_[g])
          if (r >= 0 && r < world_size) cp_group_[r] = static_cast<int>(g);
    for (int r = 0; r < world_size; ++r) {
      const int g = cp_group_[r];
      if (g == 0 || static_cast<int>(groups_[g].size()) != c)
        throw std::invalid_argument(fmt::format(
            "rank {}: the hardware setting has context parallelism of degree {}, but {}; the cost model runs ring "
            "attention over the rank's CP group (a header group named cp... of {} ranks, as gen 3d --cp writes)",
            r, c, g == 0 ? std::string("no CP group holds the rank")
                         : fmt::format("its CP group '{}' has {} ranks", group_names_[g - 1], groups_[g].size()),
            c));
    }
  }
}

void HardwareCostModel::prepare_rank(int rank, const std::vector<Op>& ops) {
  if (rank < 0 || rank >= world_size_) return;
  const int layers = static_cast<int>(forward_layers_[rank].size()) - 1;
  const int group = tp_.group.empty() ? 0 : tp_.group[rank];
  // With SP: the layers whose input the rank all-gathers again for the backward (gen 3d's schedules) rather than
  // keeping the gathered whole (tp_comm_seconds: only a re-gather runs under the backward's GEMMs).
  std::map<std::pair<int, IdSet>, int> input_gathers;
  // Mixture of Experts without expert parallelism (EP 1): in a schedule with no expert slice on this rank, an MoE
  // layer's forward runs every expert itself (TensorSizes::set_experts_inside). With expert slices elsewhere, an
  // MoE layer run so is refused (check_experts): a layer split by mistake (--dense-layers) more likely than meant.
  const bool expert_parallel = setting_.model.moe() && std::any_of(ops.begin(), ops.end(), [](const Op& op) {
    return op.kind == OpKind::AllToAll || expert_weight(op) != nullptr;
  });
  for (const Op& op : ops) {
    check_experts(op, expert_parallel);
    if (!expert_parallel && op.kind == OpKind::Forward && setting_.model.moe() && op.layer >= 0 && op.layer < layers &&
        sizes_.layer_moe_blocks(op.layer) > 0)
      sizes_.set_experts_inside(op.layer);
    if (is_compute(op.kind) && op.kind != OpKind::Update) {
      int degree = 1;
      const Tensor* sliced = nullptr;
      for (const auto* list : {&op.reads, &op.writes})
        for (const Tensor& t : *list)
          if (t.tp_size > degree) degree = t.tp_size, sliced = &t;
      if (sliced) {
        const int members = group > 0 && group < static_cast<int>(groups_.size()) ? static_cast<int>(groups_[group].size()) : 0;
        if (members != degree) {
          // (no group: group 0, whose name would be group_names_[-1])
          const std::string name =
              group > 0 && group - 1 < static_cast<int>(group_names_.size()) ? group_names_[group - 1] : "";
          throw std::invalid_argument(fmt::format(
              "{}: it computes with the TP slice {} (TP degree {}), but {}; the hardware cost model times a "
              "layer's TP communication over the rank's TP group (the header group named tp... that holds it, "
              "e.g. 'group 1 tp0 0 1')",
              op.label(), sliced->str(), degree,
              group > 0 ? fmt::format("its TP group {} ('{}') has {} ranks", group, name, members)
                        : std::string("no TP group holds the rank")));
        }
      }
      if (op.kind == OpKind::Forward && op.layer >= 0 && op.layer < layers)
        forward_layers_[rank][op.layer] = std::max(forward_layers_[rank][op.layer], static_cast<char>(degree));
      // An expert slice's forward: its expert-TP degree (the width of the activations its experts keep).
      if (const Tensor* x = op.kind == OpKind::Forward && op.layer >= 0 && op.layer < layers ? expert_weight(op) : nullptr;
          x && x->tp_size > 1) {
        if (expert_tp_.empty()) expert_tp_.assign(world_size_, {});
        if (expert_tp_[rank].empty()) expert_tp_[rank].assign(layers, 1);
        expert_tp_[rank][op.layer] = static_cast<char>(x->tp_size);
      }
      if (op.kind == OpKind::BackwardInput && op.layer >= 0 && op.layer < layers) {
        if (split_backward_.empty()) split_backward_.assign(world_size_, {});
        if (split_backward_[rank].empty()) split_backward_[rank].assign(layers, 0);
        split_backward_[rank][op.layer] = 1;
      }
    } else if (group > 0 && op.group == group && (op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllGather)) {
      for (const auto* list : {&op.reads, &op.writes})
        for (const Tensor& t : *list)
          if (t.kind == TensorKind::Activation || t.kind == TensorKind::ActivationGrad) tp_.sequence_parallel[rank] = 1;
      if (op.kind == OpKind::AllGather && !op.writes.empty() && op.writes.front().kind == TensorKind::Activation) {
        const Tensor& t = op.writes.front();
        if (t.layer >= 0 && t.layer < layers && ++input_gathers[{t.layer, t.batches}] == 2) {
          if (regathered_.empty()) regathered_.assign(world_size_, {});
          if (regathered_[rank].empty()) regathered_[rank].assign(layers, 0);
          regathered_[rank][t.layer] = 1;
        }
      }
    }
  }
}

double HardwareCostModel::load_of(const Tensor* t) const {
  // (what the slice runs: its routing load, capped or padded to the experts' capacity when tokens are dropped)
  return t && t->expert() ? setting_.model.routed_load(expert_load_factor(t->ep_index, t->ep_size)) : 1.0;
}

void HardwareCostModel::check_experts(const Op& op, bool expert_parallel) const {
  const ModelSpec& m = setting_.model;
  const int L = static_cast<int>(sizes_.layers().size());
  auto routed = [](const Tensor& t) { return t.expert() || t.route != Route::None; };
  const bool touches = op.kind == OpKind::AllToAll || std::any_of(op.reads.begin(), op.reads.end(), routed) ||
                       std::any_of(op.writes.begin(), op.writes.end(), routed);
  if (!m.moe()) {
    if (touches)
      throw std::invalid_argument(fmt::format(
          "{}: the schedule routes tokens to experts, but the model '{}' has none (model.experts=0); time it with a "
          "Mixture-of-Experts model (mixtral-8x7b, qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3, or experts=... in a JSON "
          "model)",
          op.label(), m.preset));
    return;
  }
  for (const auto* list : {&op.reads, &op.writes})
    for (const Tensor& t : *list)
      if (t.expert() && m.experts % t.ep_size != 0)
        throw std::invalid_argument(fmt::format(
            "{}: {} is one of {} expert slices, but the model '{}' has {} experts per MoE block, which {} slices do "
            "not split evenly (the EP degree must divide model.experts)",
            op.label(), t.str(), t.ep_size, m.preset, m.experts, t.ep_size));
  if (!is_compute(op.kind) || op.kind == OpKind::Update || op.kind == OpKind::Loss || op.layer < 0 || op.layer >= L)
    return;
  const LayerContent& c = sizes_.layers()[op.layer];
  const int moe = sizes_.layer_moe_blocks(op.layer);
  auto blocks = [&] {
    return c.num_blocks == 1 ? fmt::format("block {}", c.first_block)
                             : fmt::format("blocks {}..{}", c.first_block, c.first_block + c.num_blocks - 1);
  };
  if (expert_weight(op) && moe == 0)
    throw std::invalid_argument(fmt::format(
        "{}: it runs experts of layer {}, but the layer's {} of the model '{}' are dense (model.dense_blocks={}); "
        "--dense-layers of gen ep and gen 3d --ep makes the first layers dense",
        op.label(), op.layer, c.num_blocks == 0 ? std::string("no blocks") : blocks(), m.preset, m.dense_blocks));
  if (expert_parallel && op.kind == OpKind::Forward && moe > 0 && !expert_weight(op) &&
      std::none_of(op.writes.begin(), op.writes.end(), [](const Tensor& t) { return t.route == Route::Routed; }))
    throw std::invalid_argument(fmt::format(
        "{}: layer {} holds {} with experts (the model '{}' has MoE blocks from block {}), but the schedule runs its "
        "forward without them while its other MoE layers are expert-parallel: its output is not routed to the "
        "experts; generate the schedule with gen ep or gen 3d --ep, whose --dense-layers follows the model's "
        "dense_blocks (a schedule with no expert slice runs every expert on its ranks: EP 1)",
        op.label(), op.layer, moe == c.num_blocks ? blocks() : fmt::format("{} of its {}", moe, blocks()), m.preset,
        m.dense_blocks));
}

TpSplit HardwareCostModel::tp_split(const Op& op) const {
  TpSplit tp;
  for (const Tensor& t : op.reads) tp.degree = std::max<int>(tp.degree, t.tp_size);
  for (const Tensor& t : op.writes) tp.degree = std::max<int>(tp.degree, t.tp_size);
  // A loss over a sequence shard of the logits (an MoE last layer under TP and sequence parallelism) is priced as
  // the vocabulary-parallel loss of its TP group: the same work per rank, and its all-reduces.
  if (op.kind == OpKind::Loss)
    for (const Tensor& t : op.reads)
      if (t.kind == TensorKind::Activation && t.num_shards > 1 && t.shards.size() == 1)
        tp.degree = std::max<int>(tp.degree, t.num_shards);
  tp.sequence_parallel = tp.degree > 1 && op.rank >= 0 && op.rank < static_cast<int>(tp_.sequence_parallel.size()) &&
                         tp_.sequence_parallel[op.rank] != 0;
  return tp;
}

Work HardwareCostModel::op_work(const Op& op) const {
  const int L = static_cast<int>(sizes_.layers().size());
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward:
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight:
    case OpKind::Loss: {
      const int layer = op.kind == OpKind::Loss ? L - 1 : op.layer;
      if (const Tensor* x = op.kind == OpKind::Loss ? nullptr : expert_weight(op))
        return expert_work(setting_, sizes_.layers().at(layer), op.kind, static_cast<int>(op.batches.size()),
                           ExpertSplit{x->ep_size, load_of(x), x->tp_size});
      Work w = compute_work(setting_, sizes_.layers().at(layer), op.kind, static_cast<int>(op.batches.size()), 0,
                            tp_split(op));
      // EP 1: every expert's share of the tokens here (with TP each expert split over the TP group, on every token of
      // the microbatch, gathered as a dense MLP's input is).
      if (op.kind != OpKind::Loss && sizes_.experts_inside(layer))
        w += expert_work(setting_, sizes_.layers().at(layer), op.kind, static_cast<int>(op.batches.size()),
                         ExpertSplit{1, 1, tp_split(op).degree});
      return w;
    }
    case OpKind::Update: {
      // The shards it updates: those of the optimizer state it reads (of its TP slice: 1/t of the layer's; of its
      // expert slice: 1/ep of the layer's routed experts).
      double params = expert_weight(op) ? sizes_.layer_expert_parameters(op.layer) : sizes_.layer_parameters(op.layer);
      for (const Tensor& t : op.reads)
        if (t.kind == TensorKind::OptState) params *= t.held_fraction();
      return compute_work(setting_, sizes_.layers().at(op.layer), op.kind, 0, params);
    }
    default: return {};
  }
}

double HardwareCostModel::compute_seconds(const Op& op) const {
  // The same (layer, pass, microbatch count, TP degree, sequence parallelism) always costs the same: computed
  // once (a GEMM table lookup per linear layer and pass is too much for every op of a 16,384-rank schedule).
  if (const Tensor* x = !setting_.model.moe() || op.kind == OpKind::Loss ? nullptr : expert_weight(op)) {
    const std::array<int, 6> key{op.layer,    static_cast<int>(op.kind), static_cast<int>(op.batches.size()),
                                 x->ep_size, x->ep_index,                x->tp_size};
    auto [it, fresh] = expert_cache_.try_emplace(key, 0.0);
    if (fresh) {  // (the longer of the GPU's work and the host's issuing of the slice's experts)
      const double local = static_cast<double>(setting_.model.experts) / x->ep_size;
      it->second = std::max(work_seconds(setting_.device, op_work(op)),
                            expert_launch_seconds(setting_, sizes_.layers().at(op.layer), op.kind, local));
    }
    return it->second;
  }
  const TpSplit tp = tp_split(op);
  const std::uint64_t key = static_cast<std::uint64_t>(op.kind == OpKind::Loss ? 0xffff : op.layer & 0xffff) |
                            static_cast<std::uint64_t>(static_cast<int>(op.kind) & 0xff) << 16 |
                            static_cast<std::uint64_t>(op.batches.size() & 0xffffff) << 24 |
                            static_cast<std::uint64_t>(tp.degree & 0xff) << 48 |
                            static_cast<std::uint64_t>(tp.sequence_parallel ? 1 : 0) << 56;
  auto [it, fresh] = compute_cache_.try_emplace(key, 0.0);
  if (fresh) it->second = work_seconds(setting_.device, op_work(op)) + inside_expert_wait(op);
  return it->second;
}

double HardwareCostModel::inside_expert_wait(const Op& op) const {
  if (op.kind == OpKind::Loss || op.layer < 0 || !sizes_.experts_inside(op.layer)) return 0;
  const LayerContent& layer = sizes_.layers().at(op.layer);
  const double host = expert_launch_seconds(setting_, layer, op.kind, setting_.model.experts);
  if (host <= 0) return 0;
  // Every expert here (EP 1; under TP each one's slice): the host's issuing beyond the experts' own GPU work.
  const Work experts =
      expert_work(setting_, layer, op.kind, static_cast<int>(op.batches.size()), ExpertSplit{1, 1, tp_split(op).degree});
  return std::max(0.0, host - (work_seconds(setting_.device, experts) - setting_.device.efficiency.op_overhead_s));
}

double HardwareCostModel::cp_comm_seconds(const Op& op) const {
  const int c = setting_.context_parallel;
  if (c <= 1 || op.rank < 0 || op.rank >= static_cast<int>(cp_group_.size())) return 0;
  if (op.kind != OpKind::Forward && op.kind != OpKind::Backward && op.kind != OpKind::BackwardInput) return 0;
  const int L = static_cast<int>(sizes_.layers().size());
  if (op.layer < 0 || op.layer >= L) return 0;
  const LayerContent& layer = sizes_.layers()[op.layer];
  const TpSplit tp = tp_split(op);
  const double tokens = setting_.tokens_per_microbatch() * op.batches.size();
  // Ring attention (Liu et al. 2023): c - 1 steps, each passing this rank's K and V chunk (its kv heads of its
  // TP slice) to the next rank of the CP group while the attention of the chunk in hand runs; the backward
  // passes K, V and their grads. The link: NVLink when the CP group sits in one node, else a NIC.
  const ModelSpec& m = setting_.model;
  const double kv_bytes =
      m.mla() ? tokens * static_cast<double>(m.q_width() + m.o_width()) / tp.degree * m.activation_bytes  // every head's K, V
              : tokens * 2 * static_cast<double>(m.kv_width()) / tp.degree * m.activation_bytes;
  const GroupShape& g = shapes_[cp_group_[op.rank]];
  const Link link = g.nodes > 1 ? Link{setting_.network.inter_latency_s, setting_.network.inter_bandwidth}
                                : Link{setting_.network.intra_latency_s, setting_.network.intra_bandwidth};
  const AttentionSeconds attention = attention_core_seconds(setting_, tokens, tp.degree);
  const double ring_forward = (c - 1) * p2p_seconds(kv_bytes, link);
  const double ring_backward = (c - 1) * p2p_seconds(2 * kv_bytes, link);
  // What the attention does not hide, per block.
  const double forward = std::max(0.0, ring_forward - attention.forward);
  const double backward = std::max(0.0, ring_backward - attention.backward);
  double per_block = 0;
  if (op.kind == OpKind::Forward) per_block = forward;
  else {
    per_block = backward;
    if (setting_.recompute == Recompute::Full || setting_.recompute == Recompute::Selective) per_block += forward;
  }
  return layer.num_blocks * per_block;
}

GroupShape HardwareCostModel::tp_shape(int rank, int degree) const {
  const int g = rank >= 0 && rank < static_cast<int>(tp_.group.size()) ? tp_.group[rank] : 0;
  // The rank's TP group (without one: t ranks on one node).
  GroupShape shape = g > 0 && g < static_cast<int>(shapes_.size()) ? shapes_[g] : GroupShape{degree, 1, degree};
  shape.ranks = degree;
  return shape;
}

bool HardwareCostModel::regathered(int rank, int layer) const {
  return rank >= 0 && rank < static_cast<int>(regathered_.size()) && layer >= 0 &&
         layer < static_cast<int>(regathered_[rank].size()) && regathered_[rank][layer] != 0;
}

bool HardwareCostModel::split_backward(int rank, int layer) const {
  return rank >= 0 && rank < static_cast<int>(split_backward_.size()) && layer >= 0 &&
         layer < static_cast<int>(split_backward_[rank].size()) && split_backward_[rank][layer] != 0;
}

double HardwareCostModel::tp_role_seconds(int rank, int layer, OpKind pass, TpRole role, double batches, TpSplit tp,
                                          double seconds) const {
  const std::uint64_t key = 0x8000000000000000ull | static_cast<std::uint64_t>(layer & 0xffff) |
                            static_cast<std::uint64_t>(static_cast<int>(pass) & 0xf) << 16 |
                            static_cast<std::uint64_t>(static_cast<int>(role) & 0xf) << 20 |
                            static_cast<std::uint64_t>(static_cast<long long>(batches) & 0xffff) << 24 |
                            static_cast<std::uint64_t>(tp.degree & 0xff) << 40 |
                            static_cast<std::uint64_t>(tp.sequence_parallel ? 1 : 0) << 48;
  // The fraction of the collective the pass leaves exposed does not depend on the rank's link but through
  // `seconds`: cache the partner GEMM's time, not the result.
  auto [it, fresh] = compute_cache_.try_emplace(key, -1.0);
  if (fresh) {
    it->second = -1;  // no such role in the pass: exposed whole
    const double tokens = setting_.tokens_per_microbatch() * batches;
    for (const TpCollectiveSpec& c :
         tp_pass_collectives(setting_, sizes_.layers()[layer], pass, tokens, tp, sizes_.experts_inside(layer)))
      if (c.role == role) {
        it->second = c.overlapped ? c.partner_s : -1;
        break;
      }
  }
  (void)rank;
  return it->second < 0 ? seconds : std::max(0.0, seconds - it->second);
}

double HardwareCostModel::tp_comm_seconds(const Op& op) const {
  if (!is_compute(op.kind) || op.kind == OpKind::Update) return 0;
  // An expert slice's op runs no TP collective inside (expert TP's gather and reduce-scatter are the schedule's ops).
  if (setting_.model.moe() && op.kind != OpKind::Loss && expert_weight(op)) return 0;
  const TpSplit tp = tp_split(op);
  if (tp.degree <= 1) return 0;
  const GroupShape shape = tp_shape(op.rank, tp.degree);
  const NetworkSpec& net = setting_.network;
  auto time = [&](Collective c, double bytes) { return nccl_collective(c, shape, bytes, net).seconds; };
  const double tokens = setting_.tokens_per_microbatch() * op.batches.size();
  if (op.kind == OpKind::Loss)  // max, target logit, sum of exponentials: b·s fp32 values each
    return 3 * time(Collective::AllReduce, tokens * 4);
  const int L = static_cast<int>(sizes_.layers().size());
  if (op.layer < 0 || op.layer >= L) return 0;
  // Which of the pass's collectives the schedule runs as explicit ops: the reductions at the layer's ends (the
  // design's rule) and, with SP, a gather for each sequence-sharded input it reads whole.
  TpExplicit e;
  for (const Tensor& t : op.reads)
    if (t.tp_size == 1 && t.num_shards > 1 && t.complete()) {
      if (t.kind == TensorKind::Activation) e.gathered_input = true;
      if (t.kind == TensorKind::ActivationGrad) e.gathered_grad = true;
    }
  const bool regather = regathered(op.rank, op.layer);
  const std::array<int, 10> key{op.layer, static_cast<int>(op.kind), static_cast<int>(op.batches.size()), tp.degree,
                                tp.sequence_parallel, e.gathered_input, e.gathered_grad, shape.nodes,
                                shape.ranks_per_node, regather};
  auto [it, fresh] = tp_cache_.try_emplace(key, 0.0);
  if (!fresh) return it->second;
  const LayerContent& layer = sizes_.layers()[op.layer];
  const double bytes = tokens * setting_.model.hidden * setting_.model.activation_bytes;
  const std::vector<TpCollectiveSpec> specs =
      tp_pass_collectives(setting_, layer, op.kind, tokens, tp, sizes_.experts_inside(op.layer));
  double total = 0;
  for (const TpCollectiveSpec& c : specs)
    if (!tp_role_explicit(c.role, layer, op.kind, e)) total += tp_exposed_seconds(c, time(c.kind, bytes));
  // The schedule's gather of the layer's input is one op whether the forward or a backward pass needs it, priced as
  // the forward's (duration of an explicit TP collective); a backward's re-gather runs under its input-grad GEMM
  // where the forward's runs under nothing: that difference is the backward's.
  if (e.gathered_input && regather && (op.kind == OpKind::Backward || op.kind == OpKind::BackwardInput)) {
    const double gather = time(Collective::AllGather, bytes);
    for (const TpCollectiveSpec& c : specs)
      if (c.role == TpRole::InputGather)
        total -= tp_role_seconds(op.rank, op.layer, OpKind::Forward, TpRole::InputGather, op.batches.size(), tp, gather) -
                 tp_exposed_seconds(c, gather);
  }
  it->second = std::max(0.0, total);
  return it->second;
}

double HardwareCostModel::explicit_tp_seconds(const Op& op, double seconds) const {
  if (!is_tp_collective(op)) return seconds;
  const Tensor* t = op.kind == OpKind::AllGather ? (op.writes.empty() ? nullptr : &op.writes.front())
                                                 : (op.reads.empty() ? nullptr : &op.reads.front());
  if (!t || (t->kind != TensorKind::Activation && t->kind != TensorKind::ActivationGrad)) return seconds;
  // Expert TP's gather of the dispatched tokens and reduce-scatter of the experts' output: exposed whole (Megatron-
  // Core's token dispatcher runs them between its all-to-alls and the grouped GEMMs, under no GEMM).
  if (t->route != Route::None) return seconds;
  const int L = static_cast<int>(sizes_.layers().size());
  const bool grad = t->kind == TensorKind::ActivationGrad;
  // Which layer's pass the collective belongs to, and its role there (hardware/tp_comm.h).
  int layer = 0;
  TpRole role = TpRole::Inner;
  if (op.kind == OpKind::AllGather) {
    layer = grad ? t->layer - 1 : t->layer;
    role = grad ? TpRole::OutputGradGather : TpRole::InputGather;
  } else {
    layer = grad ? t->layer : t->layer - 1;
    role = grad ? TpRole::InputGradReduce : TpRole::OutputReduce;
  }
  if (layer < 0 || layer >= L) return seconds;
  const OpKind pass = !grad ? OpKind::Forward : split_backward(op.rank, layer) ? OpKind::BackwardInput : OpKind::Backward;
  TpSplit tp;
  tp.degree = std::max<int>(1, op.kind == OpKind::AllGather ? t->num_shards : t->tp_size);
  tp.sequence_parallel = op.kind != OpKind::AllReduce;
  if (tp.degree <= 1) return seconds;
  return tp_role_seconds(op.rank, layer, pass, role, t->batches.size(), tp, seconds);
}

double HardwareCostModel::tied_embedding_seconds(const Op& op) const {
  const int L = static_cast<int>(sizes_.layers().size());
  if (op.kind != OpKind::Update || tied_offset_ == 0 || (op.layer != 0 && op.layer != L - 1)) return 0;
  const int partner = op.rank + (op.layer == 0 ? tied_offset_ : -tied_offset_);
  int t = 1;
  for (const Tensor& x : op.reads) t = std::max<int>(t, x.tp_size);
  const ModelSpec& m = setting_.model;
  const double bytes = static_cast<double>(m.vocab) * m.hidden * m.grad_bytes / t;
  return nccl_collective(Collective::AllReduce, setting_.network.shape_of({op.rank, partner}), bytes, setting_.network)
      .seconds;
}

bool HardwareCostModel::tensor_parallel() const {
  return std::any_of(tp_.group.begin(), tp_.group.end(), [](int g) { return g > 0; });
}

bool HardwareCostModel::is_tp_collective(const Op& op) const {
  if (op.kind != OpKind::AllReduce && op.kind != OpKind::AllGather && op.kind != OpKind::ReduceScatter) return false;
  return op.group > 0 && op.rank >= 0 && op.rank < static_cast<int>(tp_.group.size()) && tp_.group[op.rank] == op.group;
}

double HardwareCostModel::seconds_of(const Op& op, int group_size) const {
  const double busy = busy_seconds(op, group_size);
  return is_timed(op.kind) ? busy + setting_.device.efficiency.dispatch_s : busy;
}

double HardwareCostModel::busy_seconds(const Op& op, int group_size) const {
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward:
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight:
    case OpKind::Loss:
      // An expert slice's op: its grouped GEMMs alone (no ring attention; its all-to-alls, and with expert TP its
      // gather and reduce-scatter, are ops).
      if (setting_.model.moe() && op.kind != OpKind::Loss && expert_weight(op)) return compute_seconds(op);
      return compute_seconds(op) + tp_comm_seconds(op) + cp_comm_seconds(op);
    case OpKind::Update: return work_seconds(setting_.device, op_work(op)) + tied_embedding_seconds(op);
    case OpKind::Send: {
      if (op.reads.empty() || op.peer < 0) return 0;
      return p2p_seconds(sizes_.wire_bytes(op.reads.front()), setting_.network.p2p_link(op.rank, op.peer));
    }
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllReduce:
    case OpKind::Barrier:
    case OpKind::Broadcast:
    case OpKind::Reduce: {
      const GroupShape shape = group_shape(op, group_size);
      double bytes = 0;
      Collective c = Collective::AllReduce;
      if (op.kind == OpKind::AllGather) {
        c = Collective::AllGather;
        if (!op.writes.empty()) {
          const Tensor& t = op.writes.front();
          bytes = sizes_.wire_bytes(t, load_of(&t));  // (expert TP's tokens at the slice's load)
          // FP8 all-gather of weights (torchao): the blocks' linear weights travel as one byte per parameter.
          // (an expert slice's weights are all linear: its routed experts' parameters)
          if (setting_.fp8_all_gather && t.kind == TensorKind::Weight && t.layer >= 0 &&
              t.layer < static_cast<int>(sizes_.layers().size()))
            bytes -= (t.expert() ? sizes_.layer_expert_parameters(t.layer) : sizes_.layer_linear_parameters(t.layer)) *
                     t.held_fraction() * (setting_.model.weight_bytes - 1);
        }
      } else if (op.kind == OpKind::ReduceScatter) {
        c = Collective::ReduceScatter;
        if (!op.reads.empty()) bytes = sizes_.wire_bytes(op.reads.front(), load_of(&op.reads.front()));
      } else if (op.kind == OpKind::AllReduce && !op.reads.empty()) {
        bytes = sizes_.wire_bytes(op.reads.front());
      } else if (op.kind == OpKind::Broadcast) {  // the root reads the tensor, the others write it
        c = Collective::Broadcast;
        const TensorList& t = op.reads.empty() ? op.writes : op.reads;
        if (!t.empty()) bytes = sizes_.wire_bytes(t.front());
      } else if (op.kind == OpKind::Reduce) {
        c = Collective::Reduce;
        if (!op.reads.empty()) bytes = sizes_.wire_bytes(op.reads.front());
      }
      // A TP collective at a layer's end may run under a GEMM of its pass (hardware/tp_comm.h).
      return explicit_tp_seconds(op, nccl_collective(c, shape, bytes, setting_.network).seconds);
    }
    case OpKind::AllToAll: return all_to_all_seconds(op, group_size);
    default: return 0;
  }
}

GroupShape HardwareCostModel::group_shape(const Op& op, int group_size) const {
  // Where the group's members sit (a group the model does not know: all on one node).
  GroupShape shape = op.group >= 0 && op.group < static_cast<int>(shapes_.size()) && shapes_[op.group].ranks > 0
                         ? shapes_[op.group]
                         : GroupShape{group_size, 1, group_size};
  shape.ranks = group_size;
  return shape;
}

double HardwareCostModel::all_to_all_seconds(const Op& op, int group_size) const {
  // The tokens of the rank's own microbatches (the routed or the complete tensor) and the expert slice's EP degree.
  const Tensor* tokens = nullptr;
  const Tensor* slice = nullptr;
  for (const auto* list : {&op.reads, &op.writes})
    for (const Tensor& t : *list) (t.expert() ? slice : tokens) = &t;
  const int L = static_cast<int>(sizes_.layers().size());
  if (!tokens || !slice || op.layer < 0 || op.layer >= L) return 0;
  const GroupShape shape = group_shape(op, group_size);
  // Every member sends its tokens' top_k copies; the busiest slice receives max load times the balanced share,
  // and the all-to-all ends when it has: every member is priced at that member's (the collective's end). With
  // token dropping, what the slices keep (ModelSpec::routed_load: Megatron-LM drops before the dispatch, and
  // pads to capacity there).
  double busiest = 0;  // (at least 1 dropless: the loads' mean is 1; below 1 with a capacity factor under 1)
  for (int i = 0; i < slice->ep_size; ++i)
    busiest = std::max(busiest, setting_.model.routed_load(expert_load_factor(i, slice->ep_size)));
  const ModelSpec& m = setting_.model;
  // (With sequence parallelism a member sends its sequence shard of its microbatches.)
  const double shard = static_cast<double>(tokens->shards.size()) / tokens->num_shards;
  const double token_bytes =
      setting_.tokens_per_microbatch() * tokens->batches.size() * shard * m.hidden * m.activation_bytes * busiest;
  // One all-to-all per MoE block of the layer.
  const double one = setting_.moe_dispatcher == MoeDispatcher::DeepEP
                         ? deepep_all_to_all_seconds(shape, token_bytes, m.top_k, m.experts, setting_.network,
                                                     m.router_groups, m.router_group_topk)
                         : nccl_all_to_all_seconds(shape, token_bytes * m.top_k, setting_.network);
  return sizes_.layer_moe_blocks(op.layer) * one;
}

Time HardwareCostModel::duration(const Op& op, int group_size) const { return seconds(seconds_of(op, group_size)); }

double HardwareCostModel::memory(const Tensor& t, int rank) const {
  const double load = load_of(&t);
  if (t.route == Route::ExpertIn && t.kind == TensorKind::Activation) {  // the experts' saved activations
    const bool runs = rank >= 0 && rank < static_cast<int>(forward_layers_.size()) && t.layer >= 1 &&
                      t.layer <= static_cast<int>(forward_layers_[rank].size()) && forward_layers_[rank][t.layer - 1] != 0;
    TpSplit etp;  // (the experts' inner terms are of the rank's expert-TP slice of the width)
    if (runs && rank < static_cast<int>(expert_tp_.size()) && t.layer - 1 < static_cast<int>(expert_tp_[rank].size()))
      etp.degree = std::max<int>(1, expert_tp_[rank][t.layer - 1]);
    return sizes_.resident_bytes(t, runs, etp, load);
  }
  if (t.route != Route::None || t.expert()) return sizes_.wire_bytes(t, load);
  TpSplit tp{0};  // degree 0: the rank runs no forward of the layer
  if (t.kind == TensorKind::Activation && rank >= 0 && rank < static_cast<int>(forward_layers_.size()) &&
      t.layer >= 0 && t.layer < static_cast<int>(forward_layers_[rank].size()))
    tp.degree = forward_layers_[rank][t.layer];
  if (tp.degree == 0) return sizes_.resident_bytes(t, false);
  tp.sequence_parallel = tp.degree > 1 && rank < static_cast<int>(tp_.sequence_parallel.size()) &&
                         tp_.sequence_parallel[rank] != 0;
  return sizes_.resident_bytes(t, true, tp);
}

}  // namespace trainsim::hw
