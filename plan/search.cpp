#include "plan/search.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "hardware/stage_layout.h"

namespace trainsim::plan {

Framework framework_from_name(const std::string& name, const std::string& where) {
  if (name == "any") return Framework::Any;
  if (name == "megatron") return Framework::Megatron;
  if (name == "torchtitan") return Framework::Torchtitan;
  throw hw::SpecError(fmt::format("{}: the framework is any, megatron or torchtitan, not '{}'", where, name));
}

const char* framework_name(Framework f) {
  switch (f) {
    case Framework::Megatron: return "megatron";
    case Framework::Torchtitan: return "torchtitan";
    default: return "any";
  }
}

namespace {

int seq_of(const PlanRequest& r) { return r.seq > 0 ? r.seq : r.model.seq; }

template <typename T>
std::vector<T> sorted_unique(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

SearchSpace default_space(const PlanRequest& r) {
  SearchSpace s;
  const int kv = r.model.kv_heads > 0 ? r.model.kv_heads : r.model.heads;
  for (int t = 1; t <= std::min(r.network.gpus_per_node, 64); t *= 2)
    if (r.model.heads % t == 0 && kv % t == 0) s.tp.push_back(t);
  s.cp = {1};
  if (seq_of(r) >= 32768) s.cp = {1, 2, 4, 8};
  for (int p = 1; p <= r.model.blocks && p <= r.gpus; ++p)
    if (r.gpus % p == 0) s.pp.push_back(p);
  s.chunks = {2, 4};
  s.microbatch_size = {1, 2, 4};
  switch (r.framework) {
    case Framework::Megatron:
      s.schedules = {"1f1b", "interleaved-1f1b"};
      s.zero = {1};
      break;
    case Framework::Torchtitan:
      s.schedules = {"1f1b", "interleaved-1f1b", "zbv", "dualpipev", "interleaved-zb"};
      s.zero = {3};
      break;
    default:
      s.schedules = {"1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev"};
      s.zero = {1, 3};
  }
  s.recompute = {hw::Recompute::None, hw::Recompute::Selective, hw::Recompute::Full};
  s.sp = {true};
  s.fp8 = {false};
  s.layouts = {"even", "balanced"};
  if (r.model.moe()) {
    // What gen 3d --ep runs (and its EP 1, every expert on every rank, split over the TP group with TP): TP beside EP
    // with expert TP 1 (EP a multiple of TP) or equal to TP (sequence parallelism), CP as for a dense model (EP then carved out of TP x CP x DP), ZeRO-1 (FSDP when asked; torchtitan's FSDP, its EP mesh borrowing TP and
    // part of the FSDP shards: interop/framework_args.cpp), the framework's schedules. EP: every divisor of the experts up to the GPUs (the ones that do not divide
    // TP x DP, or with TP above 1 are not a multiple of it, are removed as indivisible). TP at most 2 by default,
    // as Megatron-Bridge's MoE recipes run it (scripts/performance/configs: TP 1 or 2 beside EP): each TP degree
    // doubles the search, and DeepSeek-V3 on 2,048 GPUs takes minutes a degree (bench/README.md); --tp asks for more.
    std::erase_if(s.tp, [](int t) { return t > 2; });
    s.zero = {r.framework == Framework::Torchtitan ? 3 : 1};
    for (int e = 1; e <= r.model.experts && e <= r.gpus; ++e)
      if (r.model.experts % e == 0) s.ep.push_back(e);
    // Expert TP 1, as Megatron-Bridge's MoE recipes run it (expert_tensor_parallel_size=1): --etp 1,2 adds Megatron-
    // LM's default, equal to TP, which nearly doubles the TP 2 part of the search (DeepSeek-V3 on 2,048 GPUs: 10
    // minutes against 5, bench/README.md) and has not won a plan yet; torchtitan's expert TP is not timed.
    s.etp = {1};
  } else {
    s.ep = {1};
    s.etp = {1};
  }
  return s;
}

namespace {

// What the planner cannot search for an MoE model (gen 3d --ep's reach, schedules/generators.h), given anyway.
void check_moe_space(const PlanRequest& r, const std::vector<int>& eps, const std::vector<int>& etps) {
  const std::string& name = r.model.preset;
  if (!r.model.moe()) {
    if (eps != std::vector<int>{1})
      throw hw::SpecError(fmt::format("plan: --ep: the model '{}' has no experts (expert parallelism needs a Mixture "
                                      "of Experts: mixtral-8x7b, qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3, or a config.json with "
                                      "experts)",
                                      name));
    if (etps != std::vector<int>{1})
      throw hw::SpecError(fmt::format("plan: --etp: the model '{}' has no experts to split", name));
    if (r.moe_imbalance > 0 || !r.per_expert_load.empty())
      throw hw::SpecError(fmt::format("plan: --{}: the model '{}' has no experts to route to",
                                      r.moe_imbalance > 0 ? "moe-imbalance" : "expert-load-file", name));
    if (r.a2a_overlap)
      throw hw::SpecError(fmt::format("plan: --a2a-overlap: the model '{}' has no experts, so no all-to-alls", name));
    if (r.moe_dispatcher != hw::MoeDispatcher::Nccl)
      throw hw::SpecError(fmt::format("plan: --moe-dispatcher {}: the model '{}' has no experts to dispatch to",
                                      hw::moe_dispatcher_name(r.moe_dispatcher), name));
    return;
  }
  if (r.framework == Framework::Torchtitan && r.a2a_overlap)
    throw hw::SpecError(fmt::format("plan: --a2a-overlap with --framework torchtitan: torchtitan has no overlap of "
                                    "the all-to-alls with another microbatch's compute (plan '{}' without it, or "
                                    "with --framework megatron)",
                                    name));
  if (r.framework == Framework::Torchtitan && etps != std::vector<int>{1})
    throw hw::SpecError(fmt::format("plan: --etp with --framework torchtitan: torchtitan's expert TP routes every token "
                                    "on each TP rank, which trainsim does not time (its expert TP is Megatron-LM's: "
                                    "--framework megatron)"));
  for (int t : etps)
    if (t < 1) throw hw::SpecError(fmt::format("plan: --etp {}: an expert TP degree is at least 1", t));
  for (int e : eps)
    if (e < 1 || r.model.experts % e != 0)
      throw hw::SpecError(fmt::format("plan: --ep {}: the EP degree must divide the model's {} experts", e,
                                      r.model.experts));
  if (r.moe_imbalance != 0 && !(r.moe_imbalance >= 1))
    throw hw::SpecError(fmt::format("plan: --moe-imbalance {}: the busiest slice's load over the mean is at least 1",
                                    r.moe_imbalance));
  if (!r.per_expert_load.empty()) {
    if (r.moe_imbalance > 0)
      throw hw::SpecError("plan: give --expert-load-file or --moe-imbalance, not both");
    try {
      check_expert_load_count(r.per_expert_load, r.model.experts, name, "--expert-load-file");
    } catch (const std::invalid_argument& e) {
      throw hw::SpecError(std::string("plan: ") + e.what());
    }
  }
}

}  // namespace

std::vector<int> layout_blocks(const std::string& layout, int blocks, int chunks) {
  if (chunks < 1) return {};
  if (layout == "even") return hw::StageLayout::even(blocks, chunks).blocks_per_layer();
  if (layout != "balanced") return {};
  return hw::weighted_split(blocks, chunks, 1, 1);  // the embedding and the LM head count as a block each
}

hw::HardwareSetting setting_of(const FrameworkPlan& c, const hw::DeviceSpec& device, const hw::NetworkSpec& network) {
  hw::HardwareSetting s;
  s.model = c.model;
  s.device = device;
  s.network = network;
  s.microbatch_size = c.microbatch_size;
  s.seq = c.seq > 0 ? c.seq : c.model.seq;
  s.recompute = c.recompute;
  s.attention = c.attention;
  s.elementwise = c.elementwise;
  s.tp_overlap = c.tp_overlap;
  s.moe_dispatcher = c.moe_dispatcher;
  s.expert_gemm = c.expert_gemm;
  s.fp8 = c.fp8 || c.fp8_all_gather;
  s.fp8_all_gather = c.fp8_all_gather;
  s.context_parallel = c.options.cp;
  s.validate("plan");
  return s;
}

Enumeration enumerate(const PlanRequest& r) {
  if (r.gpus < 1) throw hw::SpecError("plan: --gpus must be at least 1");
  if (r.global_batch < 1) throw hw::SpecError("plan: --global-batch must be at least 1");
  SearchSpace d = default_space(r);
  const SearchSpace& g = r.space;
  auto pick = [](const auto& given, const auto& fallback) { return sorted_unique(given.empty() ? fallback : given); };
  const std::vector<int> tps = pick(g.tp, d.tp), cps = pick(g.cp, d.cp), pps = pick(g.pp, d.pp),
                         chunk_list = pick(g.chunks, d.chunks), mbss = pick(g.microbatch_size, d.microbatch_size),
                         zeros = pick(g.zero, d.zero);
  const std::vector<std::string> schedules = g.schedules.empty() ? d.schedules : g.schedules;  // the given order
  const std::vector<hw::Recompute> recomputes = pick(g.recompute, d.recompute);
  const std::vector<bool> sps = pick(g.sp, d.sp), fp8s = pick(g.fp8, d.fp8);
  const std::vector<std::string> layouts = pick(g.layouts, d.layouts);
  const std::vector<int> eps = pick(g.ep, d.ep);
  const std::vector<int> etps = pick(g.etp, d.etp);
  check_moe_space(r, eps, etps);
  for (int t : etps)
    if (t != 1 && std::find(tps.begin(), tps.end(), t) == tps.end())
      throw hw::SpecError(fmt::format("plan: --etp {}: expert TP is 1 or a candidate's TP degree, and no TP degree "
                                      "searched is {} (give --tp {})",
                                      t, t, t));
  if (std::find(fp8s.begin(), fp8s.end(), true) != fp8s.end() && r.device.fp8_peak_flops <= 0)
    throw hw::SpecError(fmt::format("plan: --fp8: the device '{}' has no FP8 tensor cores", r.device.preset));
  const hw::TpOverlap overlap = r.tp_overlap ? *r.tp_overlap
                                : r.framework == Framework::Torchtitan ? hw::TpOverlap::None
                                                                        : hw::TpOverlap::Backward;
  const int seq = seq_of(r), kv = r.model.kv_heads > 0 ? r.model.kv_heads : r.model.heads;
  Enumeration out;
  auto remove = [&](const char* why, long long n = 1) { out.removed[why] += n; };
  // How many combinations of the knobs below the parallel degrees one (tp, cp, pp) stands for.
  const long long per_shape = static_cast<long long>(eps.size()) * etps.size() * mbss.size() * zeros.size() *
                              recomputes.size() * sps.size() * fp8s.size() * layouts.size();
  const long long per_ep = per_shape / static_cast<long long>(eps.size());
  const long long per_etp = per_ep / static_cast<long long>(etps.size());
  for (int tp : tps)
    for (int cp : cps)
      for (int pp : pps)
        for (const std::string& schedule : schedules) {
          const bool pipelined = pp > 1;
          std::vector<int> chunk_choices = interleaved_schedule(schedule) ? chunk_list : std::vector<int>{1};
          // DP is what the others leave: a given --dp keeps the shapes that leave it (the others are not searched).
          if (!g.dp.empty()) {
            const long long shape = static_cast<long long>(tp) * cp * pp;
            if (r.gpus % shape != 0 || std::find(g.dp.begin(), g.dp.end(), r.gpus / shape) == g.dp.end()) continue;
          }
          for (int chunks : chunk_choices) {
            // Without pipelining the schedule, its chunks and the layout mean nothing: one candidate (1f1b).
            if (!pipelined && (schedule != schedules.front() || chunks != chunk_choices.front())) {
              remove("redundant", per_shape);
              continue;
            }
            const long long ranks = static_cast<long long>(tp) * cp * pp;
            if (tp > r.network.gpus_per_node) { remove("tp_across_nodes", per_shape); continue; }
            if (r.gpus % ranks != 0 || r.model.heads % tp != 0 || kv % tp != 0 || seq % cp != 0) {
              remove("indivisible", per_shape);
              continue;
            }
            const int v = chunks_per_rank(schedule, chunks);
            if (pipelined && interleaved_schedule(schedule) && chunks < 2) { remove("indivisible", per_shape); continue; }
            if (static_cast<long long>(pp) * v > r.model.blocks) { remove("indivisible", per_shape); continue; }
            const int dp = static_cast<int>(r.gpus / ranks);
            for (int ep : eps)
              for (int etp : etps) {
              // EP groups of ep of a stage's TP x CP x DP ranks (gen 3d --ep), each holding experts / ep of every
              // MoE block's experts (ep divides the experts: check_moe_space); with TP and expert TP 1 whole TP
              // groups, with expert TP equal to TP one TP index of ep TP groups. Without EP expert TP means nothing
              // of its own (every expert on every rank, split over the TP group with TP): one candidate, its knob
              // the TP degree.
              if (ep == 1 && etp != etps.front()) { remove("redundant", per_etp); continue; }
              const int expert_tp = ep == 1 ? tp : etp;
              if ((ep > 1 && etp != 1 && etp != tp) ||
                  (static_cast<long long>(tp) * cp * dp) % (static_cast<long long>(ep) * (ep > 1 ? etp : 1)) != 0 ||
                  (ep > 1 && tp > 1 && etp == 1 && ep % tp != 0)) {
                remove("indivisible", per_etp);
                continue;
              }
              if (ep > 1 && r.moe_imbalance > ep) { remove("imbalance", per_etp); continue; }
              for (int mbs : mbss)
                for (int zero : zeros)
                  for (hw::Recompute rc : recomputes)
                    for (bool sp : sps)
                      for (bool fp8 : fp8s)
                        for (const std::string& layout : layouts) {
                          const long long per_replica = static_cast<long long>(dp) * mbs;
                          if (r.global_batch % per_replica != 0) { remove("indivisible"); continue; }
                          const long long m = r.global_batch / per_replica;
                          if (m > INT32_MAX) { remove("indivisible"); continue; }
                          // (PyTorch's interleaved schedules take the microbatches in rounds of equal size)
                          if (pipelined && !interleaved_rounds_fit(schedule, pp, static_cast<int>(m))) {
                            remove("indivisible");
                            continue;
                          }
                          // Knobs that mean nothing here are kept at one value: ZeRO without data parallelism, SP
                          // without TP, a layout of one stage chunk.
                          if ((dp * cp == 1 && zero != zeros.front()) || (tp == 1 && sp != sps.front()) ||
                              (pp * v == 1 && layout != layouts.front())) {
                            remove("redundant");
                            continue;
                          }
                          std::vector<int> blocks = layout_blocks(layout, r.model.blocks, pp * v);
                          if (blocks.empty()) { remove("indivisible"); continue; }
                          if (layout != "even" && pp * v > 1 && blocks == layout_blocks("even", r.model.blocks, pp * v)) {
                            remove("redundant");
                            continue;
                          }
                          Candidate c;
                          Knobs& k = c.knobs;
                          k.tp = tp, k.cp = cp, k.pp = pp, k.chunks = v, k.dp = dp, k.microbatch_size = mbs;
                          k.microbatches = static_cast<int>(m), k.zero = dp * cp == 1 ? 0 : zero;
                          k.schedule = pipelined ? schedule : "1f1b", k.layout = pp * v == 1 ? "even" : layout;
                          k.recompute = rc, k.sp = tp > 1 && sp, k.fp8 = fp8, k.ep = ep, k.etp = expert_tp;
                          FrameworkPlan& f = c.config;
                          f.kind = "3d";
                          f.model = r.model;
                          f.microbatch_size = mbs;
                          f.seq = seq;
                          f.recompute = rc;
                          f.tp_overlap = overlap;
                          f.moe_dispatcher = r.model.moe() ? r.moe_dispatcher : hw::MoeDispatcher::Nccl;
                          // (torchtitan's experts: one grouped GEMM per linear layer; Megatron-Core's otherwise)
                          f.expert_gemm = r.model.moe() && r.framework == Framework::Torchtitan
                                              ? hw::ExpertGemm::Grouped
                                              : hw::ExpertGemm::PerExpert;
                          f.fp8 = fp8;
                          f.elementwise = hw::Elementwise::Fused;
                          GenOptions& o = f.options;
                          o.tp = tp, o.cp = cp, o.pp = pp, o.dp = dp, o.zero = k.zero;
                          o.schedule = k.schedule;
                          o.chunks = interleaved_schedule(k.schedule) ? chunks : 1;
                          o.sequence_parallel = k.sp;
                          o.microbatches = k.microbatches;
                          o.chunk_blocks = std::move(blocks);
                          if (ep > 1) {
                            o.ep = ep;
                            o.etp = etp;
                            o.moe_imbalance = r.moe_imbalance > 1 ? r.moe_imbalance : 0;
                            o.per_expert_load = r.per_expert_load;
                            o.a2a_overlap = r.a2a_overlap;
                            o = model_dense_layers("3d", o, r.model.blocks, r.model.dense_blocks);
                          }
                          out.candidates.push_back(std::move(c));
                        }
            }
          }
        }
  return out;
}

}  // namespace trainsim::plan
