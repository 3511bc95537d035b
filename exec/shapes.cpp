#include "exec/shapes.h"

#include <stdexcept>

#include <fmt/format.h>

#include "exec/model.h"
#include "exec/sequence_shard.h"

namespace trainsim::exec {

ModelShapes::ModelShapes(const ModelConfig& m, int layers, const std::vector<int>& tp_sizes,
                         const hw::StageLayout* stages, const std::map<int, int>& experts)
    : model(m), expert_parallel(experts) {
  const std::vector<LayerSpec> specs = partition(m, layers, stages);
  for (const auto& [l, e] : experts) {
    if (l < 0 || l >= static_cast<int>(specs.size()))
      throw std::invalid_argument(fmt::format("expert slices of layer {}, but the model has {} layers", l, specs.size()));
    if (!m.moe())
      throw std::invalid_argument(fmt::format(
          "the schedule has expert slices (layer {}, EP {}) but the model ({}) has no experts: replay it with an MoE "
          "model (--model tiny-moe, or --experts and --top-k)",
          l, e, m.preset));
  }
  for (const LayerSpec& s : specs) {
    if (auto it = experts.find(s.index); it != experts.end()) {
      if (s.num_blocks == 0 || !m.moe_block(s.first_block + s.num_blocks - 1))
        throw std::invalid_argument(fmt::format(
            "the schedule has expert slices of layer {}, but layer {}'s blocks ({}) are dense in the model ({}: its "
            "first {} blocks are; --dense-blocks sets how many)",
            s.index, s.index,
            s.num_blocks == 0 ? std::string("none")
                              : s.num_blocks == 1 ? std::to_string(s.first_block)
                                                  : fmt::format("{}-{}", s.first_block, s.first_block + s.num_blocks - 1),
            m.preset, m.dense_blocks));
      layouts.emplace_back(m, s, 0, 1, ExpertSplit{ExpertSplit::Dense, 0, 1});
      for (int j = 0; j < it->second; ++j)
        expert_layouts[s.index].emplace_back(m, s, 0, 1, ExpertSplit{ExpertSplit::Slice, j, it->second});
    } else {
      layouts.emplace_back(m, s);
    }
  }
  for (int t : tp_sizes)
    if (t > 1 && !experts.empty() && m.capacity_factor > 0)
      throw std::invalid_argument(fmt::format(
          "token dropping (capacity factor {:g}) with EP beside TP {}: each TP rank routes its sequence shard, so an "
          "expert's capacity would be counted over the shard's tokens (as Megatron-LM counts it), not over the "
          "microbatch's as single-device training drops them; replay token dropping with EP or TP alone",
          m.capacity_factor, t));
  for (int t : tp_sizes) {
    if (t <= 1 || tp_layouts.count(t)) continue;
    auto& by_layer = tp_layouts[t];
    for (const LayerSpec& s : specs) {
      by_layer.emplace_back();
      for (int j = 0; j < t; ++j) by_layer.back().emplace_back(m, s, j, t, layouts[s.index].expert_split());
      if (auto it = experts.find(s.index); it != experts.end()) {
        auto& slices = expert_tp_layouts[t][s.index];
        for (int j = 0; j < t; ++j) {
          slices.emplace_back();
          for (int i = 0; i < it->second; ++i)
            slices.back().emplace_back(m, s, j, t, ExpertSplit{ExpertSplit::Slice, i, it->second});
        }
      }
    }
  }
}

const LayerLayout& ModelShapes::layout(const Tensor& t) const {
  if (t.layer < 0 || t.layer >= layers())
    throw std::invalid_argument(fmt::format("{} names layer {}, but the model has {} layers", t.str(), t.layer, layers()));
  if (t.expert() && t.tp_size > 1) {
    auto by_degree = expert_tp_layouts.find(t.tp_size);
    if (by_degree != expert_tp_layouts.end())
      if (auto it = by_degree->second.find(t.layer);
          it != by_degree->second.end() && static_cast<int>(it->second.front().size()) == t.ep_size)
        return it->second.at(t.tp_index()).at(t.ep_index);
    throw std::invalid_argument(fmt::format("{}: no layout for TP slice {} of {} of expert slice {} of {} of layer {}",
                                            t.str(), t.tp_index(), t.tp_size, t.ep_index, t.ep_size, t.layer));
  }
  if (t.expert()) {
    auto it = expert_layouts.find(t.layer);
    if (it == expert_layouts.end() || static_cast<int>(it->second.size()) != t.ep_size)
      throw std::invalid_argument(fmt::format("{}: no layout for expert slice {} of {} of layer {}", t.str(), t.ep_index,
                                              t.ep_size, t.layer));
    return it->second.at(t.ep_index);
  }
  if (t.tp_size <= 1) return layouts[t.layer];
  auto it = tp_layouts.find(t.tp_size);
  if (it == tp_layouts.end())
    throw std::invalid_argument(fmt::format("{}: no layout for a TP degree of {}", t.str(), t.tp_size));
  return it->second[t.layer].at(t.tp_index());
}

long ModelShapes::elements(const Tensor& t) const {
  const int L = layers();
  const int max_layer = (t.kind == TensorKind::Activation || t.kind == TensorKind::ActivationGrad) ? L : L - 1;
  if (t.layer < 0 || t.layer > max_layer)
    throw std::invalid_argument(fmt::format("{} names layer {}, but the model has {} layers", t.str(), t.layer, L));
  // A tensor of many microbatches must not overflow int (the kernels' rows) or long: its size, and the attention
  // scores a forward over it holds, are checked in double first.
  const double seqs = static_cast<double>(t.batches.size()) * model.microbatch_size;
  const bool vocab_slice = t.layer == L && t.tp_sliced();  // the logits' TP slice: V/t columns
  const double width = static_cast<double>(row_width(t));
  for (double n : {seqs * model.seq * width, seqs * model.heads * model.seq * model.seq})
    if ((t.kind == TensorKind::Activation || t.kind == TensorKind::ActivationGrad) && n > kMaxTensorElements)
      throw std::invalid_argument(fmt::format(
          "{} ({} microbatches of {} sequences) would need {:.3g} elements in one buffer, more than the {:g} the "
          "executor allows: a smaller model or fewer microbatches per op",
          t.str(), t.batches.size(), model.microbatch_size, n, kMaxTensorElements));
  const int sequences = static_cast<int>(seqs);
  switch (t.kind) {
    case TensorKind::Weight:
    case TensorKind::WeightGrad:
    case TensorKind::OptState: {
      const long P = parameters(t);
      const long c = shard_chunk(P, t.num_shards);
      const long n = t.num_shards == 1 ? P : static_cast<long>(t.shards.size()) * c;
      return n * floats_per_element(t.kind);
    }
    case TensorKind::Activation:
    case TensorKind::ActivationGrad: {
      if (t.route != Route::None) {  // MoE tokens: the routed pairs, or an expert slice's share of its group's
        long pairs = static_cast<long>(sequences) * model.seq * model.top_k;
        if (t.num_shards > 1)  // (under TP: the pairs of the sequence shards held, balanced or not)
          pairs = sequence_shards(*this, t).rows * sequences * model.top_k * static_cast<long>(t.shards.size());
        return (t.expert() ? pairs / t.ep_size : pairs) * model.dim;
      }
      const long whole = (t.kind == TensorKind::Activation ? activation_elements(model, t.layer, L, sequences)
                                                           : activation_grad_elements(model, t.layer, L, sequences)) /
                         (vocab_slice ? t.tp_size : 1);
      if (t.num_shards == 1 || whole == 0) return whole;
      // Sequence shards (sequence parallelism): the rows of the shards held.
      return sequence_shards(*this, t).block() * sequences * static_cast<long>(t.shards.size());
    }
  }
  return 0;
}

long ModelShapes::row_width(const Tensor& t) const {
  const int L = layers();
  if (t.route != Route::None) return model.dim;  // (the routed tokens of the last layer are hidden states too)
  if (t.layer == 0) return 1;
  if (t.layer == L) return model.vocab / (t.tp_sliced() ? t.tp_size : 1);  // the logits (their vocabulary slice)
  return model.dim;
}

std::map<int, int> expert_parallel_layers(const Schedule& schedule) {
  std::map<int, int> out;
  for (const auto& ops : schedule.ranks)
    for (const Op& op : ops)
      for (const auto* ts : {&op.reads, &op.writes})
        for (const Tensor& t : *ts) {
          if (!t.expert() || t.kind == TensorKind::Activation || t.kind == TensorKind::ActivationGrad) continue;
          auto [it, fresh] = out.try_emplace(t.layer, t.ep_size);
          if (!fresh && it->second != t.ep_size)
            throw std::invalid_argument(fmt::format("{}: layer {}'s experts are sliced {} ways here and {} ways elsewhere",
                                                    op.label(), t.layer, t.ep_size, it->second));
        }
  return out;
}

const Tensor& tensor_of(std::span<const Tensor> ts, TensorKind k) {
  for (const Tensor& t : ts)
    if (t.kind == k) return t;
  throw std::invalid_argument(fmt::format("no {} among the op's tensors", long_name(k)));
}

long shard_offset(const Tensor& t, long P, long e) {
  if (t.complete() || t.num_shards == 1) return e;
  const long c = shard_chunk(P, t.num_shards);
  const int j = static_cast<int>(e / c);
  int index = 0;
  for (const auto& [lo, hi] : t.shards.runs()) {
    if (j >= lo && j < hi) return (index + (j - lo)) * c + e % c;
    index += hi - lo;
  }
  return -1;
}

}  // namespace trainsim::exec
