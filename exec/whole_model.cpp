#include "exec/whole_model.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "exec/cpu/cpu_kernels.h"
#include "exec/data.h"
#include "exec/model.h"
#include "hardware/stage_layout.h"
#include "schedules/input.h"

namespace trainsim::exec {

namespace {

// Puts every rank's tensors of `kind` (W, or O's block `part`: 0 the first moments, 1 the second) together per
// parameter. A W tensor is its shards back to back (a complete one: the P elements); an O tensor, per shard, the
// shard's c first moments then its c second moments (exec/layout.h).
NamedParameters assemble(const ModelShapes& shapes, const std::vector<HostState>& ranks, TensorKind kind, int part,
                         bool& replicas_identical) {
  NamedParameters out;
  std::map<std::string, std::vector<char>> have;
  for (const LayerLayout& lay : shapes.layouts)
    for (const ParamSpec& p : lay.params()) out[p.name].assign(p.size(), 0.0f), have[p.name].assign(p.size(), 0);
  for (const auto& [layer, slices] : shapes.expert_layouts)  // (expert parallelism: the experts' parameters)
    for (const LayerLayout& lay : slices)
      for (const ParamSpec& p : lay.params()) out[p.name].assign(p.size(), 0.0f), have[p.name].assign(p.size(), 0);
  for (const HostState& st : ranks)
    for (const auto& [t, v] : st) {
      if (t.kind != kind) continue;
      const LayerLayout& lay = shapes.layout(t);
      if (v.size() != static_cast<std::size_t>(shapes.elements(t)))
        throw std::invalid_argument(fmt::format("{} holds {} values, but this model's {} has {}", t.str(), v.size(),
                                                t.str(), shapes.elements(t)));
      const long P = lay.size();
      const bool whole = kind == TensorKind::Weight && (t.num_shards == 1 || t.complete());
      const long c = whole ? P : shard_chunk(P, t.num_shards);
      const int blocks = kind == TensorKind::OptState ? 2 : 1;
      long pos = 0;
      for (int j : whole ? std::vector<int>{0} : t.shards.ids()) {
        const long lo = j * c, hi = std::min(P, (j + 1) * c);
        const long base = pos * blocks * c + part * c;
        for (const ParamSpec& p : lay.params()) {
          std::vector<float>& full = out.at(p.name);
          std::vector<char>& got = have.at(p.name);
          for (long e = std::max(lo, p.offset); e < std::min(hi, p.offset + p.size()); ++e) {
            const float x = v[base + (e - lo)];
            const long f = p.full_index(e - p.offset);
            if (got[f] && std::memcmp(&full[f], &x, sizeof(float)) != 0) replicas_identical = false;
            full[f] = x, got[f] = 1;
          }
        }
        ++pos;
      }
    }
  for (const auto& [name, got] : have)
    for (std::size_t e = 0; e < got.size(); ++e)
      if (!got[e])
        throw std::runtime_error(fmt::format("no rank holds element {} of {}'s {}", e, name,
                                             kind == TensorKind::Weight ? "weights" : "optimizer state"));
  return out;
}

}  // namespace

NamedParameters assemble_parameters(const ModelShapes& shapes, const std::vector<HostState>& ranks,
                                    bool& replicas_identical) {
  return assemble(shapes, ranks, TensorKind::Weight, 0, replicas_identical);
}

AdamWMoments assemble_moments(const ModelShapes& shapes, const std::vector<HostState>& ranks) {
  bool identical = true;
  return AdamWMoments{assemble(shapes, ranks, TensorKind::OptState, 0, identical),
                      assemble(shapes, ranks, TensorKind::OptState, 1, identical)};
}

SavedModel read_saved_model(const std::string& dir, bool moments) {
  SavedModel out;
  out.info = read_checkpoint_info(dir);
  const std::string where = shown(dir, 4096);
  if (out.info.layers < 1)
    throw CheckpointError(fmt::format("the checkpoint in '{}' does not record how its schedule splits the model (an "
                                      "older trainsim wrote it): resume it with this trainsim and save it again",
                                      where));
  try {
    out.model = model_from_json(out.info.model);
    out.model.validate();
    std::optional<hw::StageLayout> layout;
    if (!out.info.stage_layout.empty()) layout = hw::StageLayout::parse(out.info.stage_layout);
    const hw::StageLayout* lp = layout ? &*layout : nullptr;
    // The shapes of each TP degree the ranks' tensors are sliced by, made when first met.
    std::map<int, std::unique_ptr<ModelShapes>> by_tp;
    auto shapes_for = [&](int t) -> const ModelShapes& {
      auto& sh = by_tp[t];
      if (!sh)
        sh = std::make_unique<ModelShapes>(out.model, out.info.layers, t > 1 ? std::vector<int>{t} : std::vector<int>{},
                                           lp, out.info.expert_parallel);
      return *sh;
    };
    std::vector<HostState> ranks = read_checkpoint_tensors(
        dir, out.info, [&](const Tensor& t) { return shapes_for(t.tp_sliced() ? t.tp_size : 1).bytes(t); });
    std::vector<int> degrees;
    for (const HostState& st : ranks)
      for (const auto& [t, v] : st)
        if (t.tp_sliced() && std::find(degrees.begin(), degrees.end(), t.tp_size) == degrees.end()) degrees.push_back(t.tp_size);
    std::sort(degrees.begin(), degrees.end());
    const ModelShapes shapes(out.model, out.info.layers, degrees, lp, out.info.expert_parallel);
    bool identical = true;
    out.weights = assemble_parameters(shapes, ranks, identical);
    if (moments) out.moments = assemble_moments(shapes, ranks);
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("the checkpoint in '{}': {}", where, e.what()));
  }
  return out;
}

LayerLayout whole_model_layout(const ModelConfig& model) { return LayerLayout(model, partition(model, 1).front()); }

std::vector<float> flatten_parameters(const ModelConfig& model, const NamedParameters& params) {
  const LayerLayout layout = whole_model_layout(model);
  std::vector<float> flat(static_cast<std::size_t>(layout.size()));
  for (const ParamSpec& p : layout.params()) {
    auto it = params.find(p.name);
    if (it == params.end()) throw std::invalid_argument(fmt::format("the model has no parameter '{}'", p.name));
    if (it->second.size() != static_cast<std::size_t>(p.size()))
      throw std::invalid_argument(
          fmt::format("the parameter '{}' has {} elements, not {}", p.name, it->second.size(), p.size()));
    std::copy(it->second.begin(), it->second.end(), flat.begin() + p.offset);
  }
  return flat;
}

double validation_loss(const ModelConfig& model, const std::vector<float>& flat, const TokenData& data, int sequences) {
  if (sequences < 1) throw std::invalid_argument(fmt::format("validation needs at least 1 sequence, got {}", sequences));
  const LayerLayout layout = whole_model_layout(model);
  if (flat.size() != static_cast<std::size_t>(layout.size()))
    throw std::invalid_argument(fmt::format("the model has {} parameters, not {}", flat.size(), layout.size()));
  HostAllocator alloc;
  CpuKernels<float> k;
  std::vector<float> cos, sin;
  rope_tables(model, cos, sin);
  ModelContext<float> c{.k = &k, .alloc = &alloc, .rope_cos = cos.data(), .rope_sin = sin.data()};
  const int chunk = model.microbatch_size;
  const long rows = static_cast<long>(chunk) * model.seq;
  std::vector<int> tokens(rows), targets(rows);
  std::vector<float> logits(static_cast<std::size_t>(rows) * model.vocab);
  double sum = 0;
  for (int first = 0; first < sequences; first += chunk) {
    const int count = std::min(chunk, sequences - first);
    data.validation_sequences(model, first, count, tokens.data(), targets.data());
    layer_forward(c, layout, flat.data(), tokens.data(), count, logits.data(), static_cast<LayerStash*>(nullptr));
    double part = 0;  // (the gradient it also writes, into the logits, is not used)
    loss_forward_backward(c, model, logits.data(), targets.data(), count, 1.0f, logits.data(), &part);
    sum += part;
  }
  return sum / (static_cast<double>(sequences) * model.seq);
}

}  // namespace trainsim::exec
