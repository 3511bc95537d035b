#include "hardware/setting.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace trainsim::hw {

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
    case Recompute::Op: return "op";
  }
  return "none";
}

Recompute recompute_from_name(const std::string& name, const std::string& where) {
  if (name == "none") return Recompute::None;
  if (name == "selective") return Recompute::Selective;
  if (name == "full") return Recompute::Full;
  if (name == "op") return Recompute::Op;
  throw SpecError(fmt::format("{}: expected none, selective, full or op, got '{}'", where, name));
}

const char* attention_name(Attention a) { return a == Attention::Eager ? "eager" : "flash"; }

Attention attention_from_name(const std::string& name, const std::string& where) {
  if (name == "flash") return Attention::Flash;
  if (name == "eager") return Attention::Eager;
  throw SpecError(fmt::format("{}: expected flash or eager, got '{}'", where, name));
}

const char* elementwise_name(Elementwise e) { return e == Elementwise::Eager ? "eager" : "fused"; }

Elementwise elementwise_from_name(const std::string& name, const std::string& where) {
  if (name == "fused") return Elementwise::Fused;
  if (name == "eager") return Elementwise::Eager;
  throw SpecError(fmt::format("{}: expected fused or eager, got '{}'", where, name));
}

const char* tp_overlap_name(TpOverlap o) {
  switch (o) {
    case TpOverlap::None: return "none";
    case TpOverlap::Backward: return "backward";
    case TpOverlap::Full: return "full";
  }
  return "backward";
}

TpOverlap tp_overlap_from_name(const std::string& name, const std::string& where) {
  if (name == "none") return TpOverlap::None;
  if (name == "backward") return TpOverlap::Backward;
  if (name == "full") return TpOverlap::Full;
  throw SpecError(fmt::format("{}: expected none, backward or full (the TP overlap), got '{}'", where, name));
}

const char* moe_dispatcher_name(MoeDispatcher d) { return d == MoeDispatcher::DeepEP ? "deepep" : "nccl"; }

MoeDispatcher moe_dispatcher_from_name(const std::string& name, const std::string& where) {
  if (name == "nccl") return MoeDispatcher::Nccl;
  if (name == "deepep") return MoeDispatcher::DeepEP;
  throw SpecError(fmt::format("{}: expected nccl or deepep (the MoE dispatcher), got '{}'", where, name));
}

const char* expert_gemm_name(ExpertGemm g) { return g == ExpertGemm::Grouped ? "grouped" : "per-expert"; }

ExpertGemm expert_gemm_from_name(const std::string& name, const std::string& where) {
  if (name == "per-expert") return ExpertGemm::PerExpert;
  if (name == "grouped") return ExpertGemm::Grouped;
  throw SpecError(fmt::format("{}: expected per-expert or grouped (how the experts' GEMMs are issued), got '{}'", where,
                              name));
}

void HardwareSetting::validate(const std::string& where) const {
  if (context_parallel < 1)
    throw SpecError(fmt::format("{}: the context-parallel degree must be at least 1, got {}", where, context_parallel));
  if (context_parallel > 1 && attention == Attention::Eager)
    throw SpecError(fmt::format("{}: context parallelism runs ring attention on flash attention kernels; eager "
                                "attention (--attention eager) cannot be split over a CP group",
                                where));
  if (context_parallel > 1 && seq_len() % context_parallel != 0)
    throw SpecError(fmt::format("{}: the sequence length {} does not split into {} equal context-parallel chunks",
                                where, seq_len(), context_parallel));
  if (fp8_all_gather && !fp8)
    throw SpecError(fmt::format("{}: FP8 all-gather (torchao's enable_fsdp_float8_all_gather) goes with FP8 linear "
                                "layers (fp8)",
                                where));
  if (fp8 && device.fp8_peak_flops <= 0)
    throw SpecError(fmt::format("{}: FP8 needs a device with FP8 tensor cores; '{}' has no fp8_peak_flops", where,
                                device.preset));
  if (moe_dispatcher != MoeDispatcher::Nccl && !model.moe())
    throw SpecError(fmt::format("{}: the MoE dispatcher {} needs a Mixture of Experts; the model '{}' has no experts",
                                where, moe_dispatcher_name(moe_dispatcher), model.preset));
  if (expert_gemm != ExpertGemm::PerExpert && !model.moe())
    throw SpecError(fmt::format("{}: the experts' GEMMs {} need a Mixture of Experts; the model '{}' has no experts",
                                where, expert_gemm_name(expert_gemm), model.preset));
}

std::string spec_text(const ModelSpec& m) { return m.preset + overrides_text(model_fields(), m, model_preset(m.preset)); }
std::string spec_text(const DeviceSpec& d) { return d.preset + overrides_text(device_fields(), d, device_preset(d.preset)); }
std::string spec_text(const NetworkSpec& n) {
  return n.preset + overrides_text(network_fields(), n, network_preset(n.preset));
}

namespace {

template <class T, class Preset>
T from_words(const std::vector<std::string>& words, const std::string& where, const std::vector<Field<T>>& fields,
             Preset preset, const char* what) {
  if (words.empty()) throw SpecError(fmt::format("{}: expected a {} preset name", where, what));
  T v = preset(words.front());
  for (std::size_t i = 1; i < words.size(); ++i) {
    auto eq = words[i].find('=');
    if (eq == std::string::npos || eq == 0)
      throw SpecError(fmt::format("{}: expected key=value after the {} preset, got '{}'", where, what, words[i]));
    apply_override(fields, v, words[i].substr(0, eq), words[i].substr(eq + 1), where);
  }
  v.validate(where);
  return v;
}

}  // namespace

bool is_json_path(const std::string& value) {
  return (value.size() > 5 && value.ends_with(".json")) || value.find('/') != std::string::npos ||
         std::filesystem::is_regular_file(value);
}

namespace {

// The deepest nesting of objects and arrays in JSON text (strings skipped), stopping once past `limit`: a
// description nested deeper than any field is refused before it is parsed or walked (issue 38: 200,000 nested
// objects overflowed the stack).
int json_depth(const std::string& text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size() && deepest <= limit; ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw SpecError(fmt::format("{}: cannot open the file", path));
  std::stringstream ss;
  ss << f.rdbuf();
  constexpr int kMaxDepth = 16;  // the descriptions nest 2 levels (efficiency.forward); a calibration block 3
  if (json_depth(ss.str(), kMaxDepth) > kMaxDepth)
    throw SpecError(fmt::format("{}: objects or arrays nested deeper than {} levels (a description nests at most 3)",
                                path, kMaxDepth));
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {  // parse errors, and numbers out of range (1e400)
    throw SpecError(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
}

ModelSpec model_from_words(const std::vector<std::string>& words, const std::string& where) {
  return from_words(words, where, model_fields(), model_preset, "model");
}
DeviceSpec device_from_words(const std::vector<std::string>& words, const std::string& where) {
  return from_words(words, where, device_fields(), device_preset, "device");
}
NetworkSpec network_from_words(const std::vector<std::string>& words, const std::string& where) {
  return from_words(words, where, network_fields(), network_preset, "network");
}

ModelSpec load_model(const std::string& value) {
  if (is_json_path(value)) return model_from_json(read_json_file(value), value);
  ModelSpec m = model_preset(value);
  if (value != "custom") m.validate(value);
  return m;
}
DeviceSpec load_device(const std::string& value) {
  if (is_json_path(value)) return device_from_json(read_json_file(value), value);
  return device_preset(value);
}
NetworkSpec load_network(const std::string& value) {
  if (is_json_path(value)) return network_from_json(read_json_file(value), value);
  return network_preset(value);
}

}  // namespace trainsim::hw
