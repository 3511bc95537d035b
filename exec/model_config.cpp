#include "exec/model_config.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "exec/json_fields.h"
#include "hardware/model.h"  // hw::ModelSpec: the capacity factors a model takes
#include "schedules/input.h"  // shown(): long input quoted in errors at most 80 bytes

namespace trainsim::exec {

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

}  // namespace

void ModelConfig::validate() const {
  require(vocab >= 2, fmt::format("vocab must be at least 2, got {}", vocab));
  require(dim >= 2, fmt::format("dim must be at least 2, got {}", dim));
  require(heads >= 1, fmt::format("heads must be at least 1, got {}", heads));
  require(dim % heads == 0, fmt::format("dim ({}) must be a multiple of heads ({})", dim, heads));
  require(head_dim() % 2 == 0, fmt::format("the head size dim/heads = {} must be even (rotary pairs)", head_dim()));
  require(blocks >= 1, fmt::format("blocks must be at least 1, got {}", blocks));
  require(ffn >= 1, fmt::format("ffn must be at least 1, got {}", ffn));
  require(seq >= 1, fmt::format("seq must be at least 1, got {}", seq));
  require(microbatch_size >= 1, fmt::format("microbatch size must be at least 1, got {}", microbatch_size));
  require(experts >= 0 && experts <= 1024, fmt::format("experts must be 0 (a dense model) to 1024, got {}", experts));
  if (experts > 0) {
    require(top_k >= 1 && top_k <= experts,
            fmt::format("top_k must be 1 to experts ({}) for an MoE model, got {}", experts, top_k));
    require(dense_blocks >= 0 && dense_blocks < blocks,
            fmt::format("dense_blocks must be 0 to blocks - 1 ({}) for an MoE model (at least one MoE block), got {}",
                        blocks - 1, dense_blocks));
    constexpr double lo = hw::ModelSpec::kMinCapacityFactor, hi = hw::ModelSpec::kMaxCapacityFactor;  // (one range)
    require(capacity_factor == 0 || (capacity_factor >= lo && capacity_factor <= hi),
            fmt::format("capacity_factor must be 0 (dropless) or {:g} to {:g}, got {}", lo, hi, capacity_factor));
    require(aux_loss_coeff >= 0 && aux_loss_coeff <= kMaxAuxLossCoeff,  // (false for NaN)
            fmt::format("aux_loss_coeff must be 0 (none) to {:g}, got {}", kMaxAuxLossCoeff, aux_loss_coeff));
  } else {
    require(top_k == 0 && dense_blocks == 0 && capacity_factor == 0 && aux_loss_coeff == 0,
            fmt::format("top_k ({}), dense_blocks ({}), capacity_factor ({}) and aux_loss_coeff ({}) are for MoE "
                        "models: set experts too",
                        top_k, dense_blocks, capacity_factor, aux_loss_coeff));
  }
  // Keep every buffer's element count well inside int range (kernels index with int rows and long elements).
  // In double: the products of ints overflow int and long long before they can be compared.
  const double d = dim, f = ffn, v = vocab, t = seq, b = microbatch_size;
  const std::pair<const char*, double> tensors[] = {
      {"a block's wqkv matrix (3·dim × dim)", 3 * d * d},
      {"a block's wgu matrix (2·ffn × dim)", 2 * f * d},
      {"the embedding (vocab × dim)", v * d},
      {"a microbatch's attention scores (microbatch size × heads × seq × seq)", b * heads * t * t},
      {"a microbatch's FFN activations (microbatch size × seq × 2·ffn)", b * t * 2 * f},
      {"a microbatch's activations (microbatch size × seq × 3·dim)", b * t * 3 * d},
      {"a microbatch's logits (microbatch size × seq × vocab)", b * t * v},
      {"a microbatch's router logits (microbatch size × seq × experts)", b * t * experts},
      {"a microbatch's routed tokens (microbatch size × seq × top_k × 2·ffn)", b * t * top_k * 2 * f},
  };
  for (const auto& [what, n] : tensors)
    require(n <= kMaxTensorElements,
            fmt::format("the model is too large for the executor: {} would hold {:.3g} elements, more than the {:g} "
                        "one tensor may hold",
                        what, n, kMaxTensorElements));
  const double moe_blocks = experts > 0 ? blocks - dense_blocks : 0;
  const double params = blocks * (4 * d * d + 3 * f * d + 2 * d) + 2 * v * d + d +
                        moe_blocks * (static_cast<double>(experts) * d + (experts - 1.0) * 3 * f * d);
  require(params <= kMaxParameters, fmt::format("the model is too large for the executor: {:.3g} parameters, more than "
                                                "{:g}",
                                                params, kMaxParameters));
  require(norm_eps > 0 && rope_theta > 0 && init_std > 0 && std::isfinite(norm_eps) && std::isfinite(rope_theta) &&
              std::isfinite(init_std),
          "norm_eps, rope_theta and init_std must be positive and finite");
}

namespace {

// Parameters of the model when each MoE block holds `experts_held` experts.
long count_parameters(const ModelConfig& m, long experts_held) {
  const long d = m.dim, f = m.ffn, v = m.vocab;
  const long attention = d + 3 * d * d + d * d + d;  // norm, wqkv, wo, FFN norm
  const long dense_block = attention + 3 * f * d;
  const long moe_block = attention + static_cast<long>(m.experts) * d + experts_held * 3 * f * d;  // router, experts
  const long moe = m.moe() ? m.blocks - m.dense_blocks : 0;
  return v * d + (m.blocks - moe) * dense_block + moe * moe_block + d + v * d;
}

}  // namespace

long ModelConfig::parameters() const { return count_parameters(*this, experts); }

long ModelConfig::active_parameters() const { return count_parameters(*this, top_k); }

double ModelConfig::flops_per_token() const {
  double n = static_cast<double>(active_parameters()) - static_cast<double>(vocab) * dim;  // the embedding is a lookup
  return 6.0 * n + 12.0 * blocks * dim * static_cast<double>(seq);
}

std::string ModelConfig::describe() const {
  const std::string experts_part =
      moe() ? fmt::format(", {} MoE block{} of {} experts (top-{}{})", blocks - dense_blocks,
                          blocks - dense_blocks == 1 ? "" : "s", experts, top_k,
                          (capacity_factor > 0 ? fmt::format(", capacity factor {:g}", capacity_factor) : "") +
                              (aux_loss_coeff > 0 ? fmt::format(", aux loss {:g}", aux_loss_coeff) : ""))
            : "";
  const std::string active = moe() ? fmt::format(" ({:L} active)", active_parameters()) : "";
  return fmt::format("{}: {} blocks, dim {}, {} heads, ffn {}{}, seq {}, {} sequences/microbatch, {:L} parameters{}",
                     preset, blocks, dim, heads, ffn, experts_part, seq, microbatch_size, parameters(), active);
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names{"tiny", "small", "tiny-moe", "small-moe"};
  return names;
}

ModelConfig preset(const std::string& name) {
  ModelConfig m;
  m.preset = name;
  if (name == "tiny") return m;  // the defaults above
  if (name == "small" || name == "small-moe") {
    m.dim = 256;
    m.heads = 4;
    m.blocks = 4;
    m.ffn = 768;
    m.seq = 128;
    m.microbatch_size = 8;
    if (name == "small-moe") m.ffn = 384, m.experts = 8, m.top_k = 2;
    return m;
  }
  if (name == "tiny-moe") {
    m.experts = 4, m.top_k = 2;
    return m;
  }
  std::string list;
  for (const auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
  throw std::invalid_argument(fmt::format("unknown model preset '{}' (presets: {})", name, list));
}

std::vector<LayerSpec> partition(const ModelConfig& model, int layers, const hw::StageLayout* layout) {
  if (layout) {
    if (layout->layers() != layers)
      throw std::invalid_argument(fmt::format("the layout '{}' has {} stages but the schedule has {} layers (one stage "
                                              "per layer)",
                                              shown(layout->str()), layout->layers(), layers));
    if (layout->blocks() != model.blocks)
      throw std::invalid_argument(fmt::format("the layout '{}' holds {} blocks but the model has {} (try --blocks {})",
                                              shown(layout->str()), layout->blocks(), model.blocks, layout->blocks()));
    std::vector<LayerSpec> specs;
    int i = 0;
    for (const hw::LayerContent& c : layout->contents()) {
      if (c.num_blocks == 0 && !c.embedding && !c.head)
        throw std::invalid_argument(fmt::format(
            "the layout '{}' leaves layer {} empty (no block, embedding or head): the executor needs every layer to "
            "compute something",
            shown(layout->str()), i));
      specs.push_back(LayerSpec{i++, c.first_block, c.num_blocks, c.embedding, c.head});
    }
    return specs;
  }
  if (layers < 1) throw std::invalid_argument(fmt::format("a schedule needs at least one layer, got {}", layers));
  if (model.blocks % layers != 0 || model.blocks < layers) {
    int suggest = ((model.blocks + layers - 1) / layers) * layers;
    throw std::invalid_argument(fmt::format(
        "the schedule has {} layers but the model has {} blocks: each schedule layer holds an equal, contiguous "
        "chunk of blocks, so blocks must be a multiple of layers (try --blocks {})",
        layers, model.blocks, suggest));
  }
  int per = model.blocks / layers;
  std::vector<LayerSpec> specs;
  for (int i = 0; i < layers; ++i) specs.push_back(LayerSpec{i, i * per, per, i == 0, i == layers - 1});
  return specs;
}

nlohmann::json to_json(const ModelConfig& m) {
  nlohmann::json j{{"preset", m.preset},     {"vocab", m.vocab},
                    {"dim", m.dim},           {"heads", m.heads},
                    {"blocks", m.blocks},     {"ffn", m.ffn},
                    {"seq", m.seq},           {"microbatch_size", m.microbatch_size},
                    {"rope_theta", m.rope_theta}, {"norm_eps", m.norm_eps},
                    {"init_std", m.init_std}};
  if (m.moe()) {  // (a dense model's manifest as before the MoE fields)
    j["experts"] = m.experts;
    j["top_k"] = m.top_k;
    j["dense_blocks"] = m.dense_blocks;
    if (m.capacity_factor > 0) j["capacity_factor"] = m.capacity_factor;  // (dropless manifests as before it)
    if (m.aux_loss_coeff > 0) j["aux_loss_coeff"] = m.aux_loss_coeff;     // (and without the loss, as before it)
  }
  return j;
}

namespace {

// A manifest's integer field: an integer that fits an int, else an error naming it (exec/json_fields.h).
int int_field(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer())
    throw std::invalid_argument(fmt::format("model configuration: '{}' must be an integer, not {}", key, v.dump()));
  const std::optional<long long> n = json_integer(v);
  if (!n || *n < std::numeric_limits<int>::min() || *n > std::numeric_limits<int>::max())
    throw std::invalid_argument(fmt::format("model configuration: '{}' is {}, beyond an int", key, v.dump()));
  return static_cast<int>(*n);
}

// A manifest's float field: a number a float holds finitely (1e39 would become inf and pass a "> 0" check).
float float_field(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number()) throw std::invalid_argument(fmt::format("model configuration: '{}' must be a number, not {}", key, v.dump()));
  const std::optional<float> f = json_float(v);
  if (!f)
    throw std::invalid_argument(fmt::format("model configuration: '{}' is {}, beyond what a float holds", key, v.dump()));
  return *f;
}

// A manifest's double field: a finite number.
double double_field(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    throw std::invalid_argument(fmt::format("model configuration: '{}' must be a finite number, not {}", key, v.dump()));
  return v.get<double>();
}

}  // namespace

ModelConfig model_from_json(const nlohmann::json& j) {
  ModelConfig m;
  try {
    m.preset = j.at("preset").get<std::string>();
    m.vocab = int_field(j, "vocab");
    m.dim = int_field(j, "dim");
    m.heads = int_field(j, "heads");
    m.blocks = int_field(j, "blocks");
    m.ffn = int_field(j, "ffn");
    m.seq = int_field(j, "seq");
    m.microbatch_size = int_field(j, "microbatch_size");
    m.rope_theta = float_field(j, "rope_theta");
    m.norm_eps = float_field(j, "norm_eps");
    m.init_std = float_field(j, "init_std");
    // (MoE fields: absent from the manifests of trainsim before them, whose models are dense)
    if (j.contains("experts")) m.experts = int_field(j, "experts");
    if (j.contains("top_k")) m.top_k = int_field(j, "top_k");
    if (j.contains("dense_blocks")) m.dense_blocks = int_field(j, "dense_blocks");
    // (doubles, as written: a float would not read back the same)
    if (j.contains("capacity_factor")) m.capacity_factor = double_field(j, "capacity_factor");
    if (j.contains("aux_loss_coeff")) m.aux_loss_coeff = double_field(j, "aux_loss_coeff");
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(fmt::format("model configuration: {}", e.what()));
  }
  return m;
}

}  // namespace trainsim::exec
