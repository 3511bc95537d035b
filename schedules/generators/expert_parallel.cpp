// gen ep: expert parallelism over data-parallel ranks (docs/design.md, "Mixture of Experts"; Lepikhin et al.
// 2020, GShard; Megatron-Core MoE). dp ranks each run every layer on their own m microbatches (rank r's i-th:
// batch i*dp + r, as the data-parallel kinds; the header's microbatches are dp*m). The EP groups are `ep`
// consecutive ranks (Megatron-Core carves expert parallelism out of the data-parallel ranks, EP fastest): rank r is
// member j = r mod ep of EP group r / ep and holds expert slice j of every MoE layer; the ranks holding the same
// slice (r mod ep equal) form its expert-data-parallel group of dp/ep ranks.
//
// Layers 0 .. dense-1 are dense (DeepSeek-V3's first three), the others MoE. An MoE layer's forward: its dense part
// (attention, router) writes the routed tokens; the dispatch all-to-all over the EP group gives slice j the tokens
// of the group's microbatches; the experts run; the combine all-to-all gives each rank its own tokens back. The
// backward is the conjugate: the output's grad dispatched, the experts' backward, the combine, the dense part's
// backward. After the last microbatch each rank all-reduces its dense grads over every rank and its expert grads
// over its expert-data-parallel group (none when ep = dp), then updates its layers and its expert slices. Every op
// runs on the compute stream, as Megatron-Core's all-to-all token dispatcher runs without overlap.
#include <fmt/format.h>

#include <cmath>

#include "schedules/generators/builder.h"

namespace trainsim::gen {

Schedule gen_expert_parallel(const GenOptions& o) {
  const std::string kind = "ep";
  require_at_least(kind, "dp", o.dp, 1);
  require_at_least(kind, "ep", o.ep, 1);
  require_at_least(kind, "microbatches", o.microbatches, 1);
  require_at_least(kind, "layers", o.layers, 0);
  require_at_least(kind, "dense-layers", o.dense_layers, 0);
  if (o.etp != 1)
    throw std::invalid_argument(fmt::format("{}: --etp splits experts over a TP group: gen 3d --ep --tp --etp", kind));
  const int n = o.dp, e = o.ep, m = o.microbatches, L = o.layers == 0 ? 4 : o.layers, M = n * m;
  if (e > Tensor::kMaxEpSize)
    throw std::invalid_argument(fmt::format("{}: --ep must be at most {} (got {})", kind, Tensor::kMaxEpSize, e));
  if (n % e != 0)
    throw std::invalid_argument(fmt::format("{}: --ep {} must divide --dp {}: the EP groups are carved out of the "
                                            "data-parallel ranks",
                                            kind, e, n));
  if (o.dense_layers >= L)
    throw std::invalid_argument(fmt::format("{}: --dense-layers {} leaves no MoE layer of the {} layers", kind,
                                            o.dense_layers, L));
  const int replicas = n / e;  // the expert-data-parallel degree
  const std::vector<double> load = expert_loads(kind, o, e);

  Schedule sched;
  sched.header = make_header(n, L, M);
  sched.header.version = 3;
  sched.header.expert_load = load;
  // Groups: every rank ("dp", the dense grads), the EP groups, then the expert-data-parallel groups.
  auto add_group = [&](std::string name, std::vector<int> ranks) {
    sched.header.groups.push_back(std::move(ranks));
    sched.header.group_names.push_back(std::move(name));
    return static_cast<int>(sched.header.groups.size());
  };
  std::vector<int> everyone(n);
  for (int r = 0; r < n; ++r) everyone[r] = r;
  const int dp_group = n > 1 ? add_group("dp0", everyone) : 0;
  std::vector<int> ep_group(replicas), edp_group(e, 0);
  for (int g = 0; g < replicas; ++g) {
    std::vector<int> members;
    for (int j = 0; j < e; ++j) members.push_back(g * e + j);
    ep_group[g] = add_group(fmt::format("ep{}", g), std::move(members));
  }
  if (replicas > 1)
    for (int j = 0; j < e; ++j) {
      std::vector<int> members;
      for (int g = 0; g < replicas; ++g) members.push_back(g * e + j);
      edp_group[j] = add_group(fmt::format("edp{}", j), std::move(members));
    }

  auto moe = [&](int l) { return l >= o.dense_layers; };
  for (int r = 0; r < n; ++r) {
    const int g = r / e, j = r % e;
    RankProgram prog(r, L, M);
    prog.reserve(static_cast<std::size_t>(m) * L * 16 + 8 * L);
    auto expert = [&](Tensor t) { return expert_slice(std::move(t), j, e); };
    const ExpertPlace place{j, e, ep_group[g]};
    TensorList state;
    for (int l = 0; l < L; ++l) {
      state.push_back(weight_tensor(l));
      state.push_back(opt_state_tensor(l));
      if (moe(l)) state.push_back(expert(weight_tensor(l))), state.push_back(expert(opt_state_tensor(l)));
    }
    prog.load(std::move(state));
    for (int i = 0; i < m; ++i) {
      const IdSet b = one(i * n + r);
      const IdSet group_batches = IdSet::range(i * n + g * e, i * n + g * e + e);  // the EP group's microbatches
      prog.load({activation_tensor(0, b)});
      for (int l = 0; l < L; ++l)
        if (moe(l))
          moe_forward(prog, l, b, group_batches, place, activation_tensor(l, b), weight_tensor(l),
                      activation_tensor(l + 1, b));
        else
          prog.compute(OpKind::Forward, l, b, {activation_tensor(l, b), weight_tensor(l)}, {activation_tensor(l + 1, b)});
      prog.compute(OpKind::Loss, L, b, {activation_tensor(L, b)}, {activation_grad_tensor(L, b)});
      prog.free({activation_tensor(L, b)});
      for (int l = L - 1; l >= 0; --l) {
        Tensor grad = activation_grad_tensor(l + 1, b);
        if (moe(l)) grad = moe_backward_experts(prog, l, b, group_batches, place, grad);
        prog.compute(OpKind::Backward, l, b, {activation_tensor(l, b), grad, weight_tensor(l)},
                     {weight_grad_tensor(l, b), activation_grad_tensor(l, b)});
        prog.free({activation_tensor(l, b), grad});
        prog.add_grad(weight_grad_tensor(l, b));
      }
      prog.free({activation_grad_tensor(0, b)});
    }
    const IdSet all = IdSet::range(0, M);
    auto step = [&](int l, bool is_expert) {
      Tensor grad = prog.take_grad(l, is_expert);
      const int group = is_expert ? edp_group[j] : dp_group;
      if (group != 0) {
        Tensor reduced = is_expert ? expert(weight_grad_tensor(l, all)) : weight_grad_tensor(l, all);
        prog.collective(OpKind::AllReduce, l, group, grad, reduced);
        prog.free({grad});
        grad = std::move(reduced);
      }
      Tensor w = weight_tensor(l), opt = opt_state_tensor(l);
      if (is_expert) w = expert(w), opt = expert(opt);
      Tensor w1 = w, opt1 = opt;
      ++w1.step, ++opt1.step;
      prog.compute(OpKind::Update, l, {}, {grad, w, opt}, {w1, opt1});
      prog.free({grad, w, opt});
    };
    for (int l = 0; l < L; ++l) {
      step(l, false);
      if (moe(l)) step(l, true);
    }
    sched.ranks.push_back(std::move(prog.ops()));
  }
  return sched;
}

}  // namespace trainsim::gen
