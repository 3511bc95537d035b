// gen --from-megatron and --from-torchtitan (interop/framework_args.h; docs/frameworks.md).
#include "interop/framework_args.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
// toml++ (Debian's libtomlplusplus-dev): torchtitan's TOML job configurations.
#include <toml++/toml.h>

#include "hardware/stage_layout.h"
#include "schedules/input.h"  // shown(): long input quoted in errors at most 80 bytes

namespace trainsim {

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\'' || c == '"') {
      const std::size_t close = text.find(c, i + 1);
      if (close == std::string_view::npos)
        throw std::invalid_argument(fmt::format("an unclosed {} quote at character {}", c == '"' ? "double" : "single", i + 1));
      for (std::size_t j = i + 1; j < close; ++j) {
        if (c == '"' && text[j] == '\\' && j + 1 < close) ++j;
        word += text[j];
      }
      i = close;
      in_word = true;
    } else if (c == '\\' && i + 1 < text.size()) {
      word += text[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word) words.push_back(std::move(word)), word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

namespace {

// ---- flags ---------------------------------------------------------------------------------------------

enum class Arg { Value, Flag };

// The flags of a command line as name -> value ("true" for a flag given alone), the last one winning as
// argparse does. `arity`: how each known name takes its value; `ignored`: names accepted without effect (their
// values, any number, skipped); `framework` names the framework in errors.
struct Flags {
  std::map<std::string, std::string> values;
  std::vector<std::string> ignored;  // given, no effect (in order, once each)

  bool has(const std::string& k) const { return values.count(k) > 0; }
  const std::string* get(const std::string& k) const {
    auto it = values.find(k);
    return it == values.end() ? nullptr : &it->second;
  }
};

[[noreturn]] void refuse(const std::string& what) { throw std::invalid_argument(what); }

Flags read_words(const std::vector<std::string>& words, const std::string& framework,
                 const std::map<std::string, Arg>& known, const std::set<std::string>& ignored,
                 const std::set<std::string>& ignored_sections, std::string (*normalize)(const std::string&),
                 const std::string& doc);

// --name VALUE, --name=VALUE, or --name alone for a flag. `normalize` maps a written name to its table key
// (torchtitan accepts '-' for '_' in field names; both frameworks' tables use the spelling of their source). Every
// flag outside `known` and `ignored` is refused, all of them in one message.
Flags read_flags(const std::string& text, const std::string& framework, const std::map<std::string, Arg>& known,
                 const std::set<std::string>& ignored, const std::set<std::string>& ignored_sections,
                 std::string (*normalize)(const std::string&), const std::string& doc) {
  Flags f;
  std::vector<std::string> words;
  try {
    words = split_words(text);
  } catch (const std::invalid_argument& e) {
    refuse(fmt::format("--from-{}: {}", framework, e.what()));
  }
  return read_words(words, framework, known, ignored, ignored_sections, normalize, doc);
}

Flags read_words(const std::vector<std::string>& words, const std::string& framework,
                 const std::map<std::string, Arg>& known, const std::set<std::string>& ignored,
                 const std::set<std::string>& ignored_sections, std::string (*normalize)(const std::string&),
                 const std::string& doc) {
  Flags f;
  std::vector<std::string> unknown;  // flags outside the subset, refused together
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w.size() < 3 || w.compare(0, 2, "--") != 0)
      refuse(fmt::format("--from-{}: expected a flag (--name), got '{}'", framework, w));
    std::string name = w.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) value = name.substr(eq + 1), name = name.substr(0, eq), has_value = true;
    name = normalize(name);
    auto section = name.find('.');
    if (ignored.count(name) || (section != std::string::npos && ignored_sections.count(name.substr(0, section)))) {
      if (std::find(f.ignored.begin(), f.ignored.end(), "--" + name) == f.ignored.end()) f.ignored.push_back("--" + name);
      if (!has_value)
        while (i + 1 < words.size() && words[i + 1].compare(0, 2, "--") != 0) ++i;  // its values (nargs='*')
      continue;
    }
    auto it = known.find(name);
    bool negated = false;
    if (it == known.end() && framework == "torchtitan") {  // tyro's --SECTION.no-FIELD / --SECTION.no_FIELD
      if (section != std::string::npos && name.compare(section + 1, 3, "no_") == 0) {
        const std::string positive = name.substr(0, section + 1) + name.substr(section + 4);
        auto p = known.find(positive);
        if (p != known.end() && p->second == Arg::Flag) it = p, negated = true, name = positive;
      }
    }
    if (it == known.end()) {  // skipped with its values, refused below with every other such flag
      if (std::find(unknown.begin(), unknown.end(), "--" + name) == unknown.end()) unknown.push_back("--" + name);
      if (!has_value)
        while (i + 1 < words.size() && words[i + 1].compare(0, 2, "--") != 0) ++i;
      continue;
    }
    if (it->second == Arg::Flag) {
      if (has_value) {
        if (value != "true" && value != "false" && value != "True" && value != "False")
          refuse(fmt::format("--from-{}: --{} is a flag: true or false, not '{}'", framework, name, value));
        value = value == "true" || value == "True" ? "true" : "false";
      } else if (i + 1 < words.size() && (words[i + 1] == "true" || words[i + 1] == "false" || words[i + 1] == "True" ||
                                          words[i + 1] == "False")) {
        value = words[++i] == "true" || words[i] == "True" ? "true" : "false";
      } else {
        value = "true";
      }
      if (negated) value = value == "true" ? "false" : "true";
    } else if (!has_value) {
      if (i + 1 >= words.size() || (words[i + 1].compare(0, 2, "--") == 0 && words[i + 1].size() > 2))
        refuse(fmt::format("--from-{}: --{} needs a value", framework, name));
      value = words[++i];
    }
    f.values[name] = value;
  }
  if (!unknown.empty()) {
    std::string names;
    for (const auto& n : unknown) names += (names.empty() ? "" : ", ") + n;
    refuse(fmt::format("--from-{}: {} {} not in the subset trainsim reads ({} lists it, flag by flag: the flags that "
                       "change a step and are modelled, and those accepted because they do not change it)",
                       framework, names, unknown.size() == 1 ? "is" : "are", doc));
  }
  return f;
}

std::string as_is(const std::string& s) { return s; }
// torchtitan (tyro) accepts dashes in field names: --training.local-batch-size is --training.local_batch_size.
std::string underscores(const std::string& s) {
  std::string out = s;
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

// An integer value of flag `name` (at least `min`); `fallback` when not given.
long long integer(const Flags& f, const std::string& framework, const std::string& name, long long fallback,
                  long long min = 1) {
  const std::string* v = f.get(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || end != v->c_str() + v->size() || errno != 0 || n < min || n > (1LL << 31) - 1)
    refuse(fmt::format("--from-{}: --{} takes an integer of at least {}, not '{}'", framework, name, min, *v));
  return n;
}

double number(const Flags& f, const std::string& framework, const std::string& name, double fallback) {
  const std::string* v = f.get(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v->c_str(), &end);
  if (v->empty() || end != v->c_str() + v->size() || !std::isfinite(d) || d < 0)
    refuse(fmt::format("--from-{}: --{} takes a number of at least 0, not '{}'", framework, name, *v));
  return d;
}

bool flag(const Flags& f, const std::string& name) {
  const std::string* v = f.get(name);
  return v && *v == "true";
}

std::string text(const Flags& f, const std::string& name, const std::string& fallback) {
  const std::string* v = f.get(name);
  return v ? *v : fallback;
}

// The note saying which flags were accepted without effect.
void note_ignored(const Flags& f, FrameworkPlan& plan) {
  if (f.ignored.empty()) return;
  std::string names;
  for (const auto& n : f.ignored) names += (names.empty() ? "" : ", ") + n;
  plan.notes.push_back(fmt::format("accepted without effect on a step's time or memory: {}", names));
}

void note_dp(const FrameworkInputs& in, const std::string& framework, FrameworkPlan& plan) {
  if (!in.dp_given)
    plan.notes.push_back(fmt::format("data-parallel degree 1: {} takes it from the world size, which its flags do not "
                                     "hold; give it with gen --dp N",
                                     framework));
}

// A stage layout from the blocks of each stage, through its text (the one place that checks layouts).
std::string layout_text(const std::vector<int>& blocks) { return hw::StageLayout(blocks).str(); }

// ---- Megatron-LM -----------------------------------------------------------------------------------------

const std::map<std::string, Arg>& megatron_flags() {
  static const std::map<std::string, Arg> m = {
      {"tensor-model-parallel-size", Arg::Value},
      {"pipeline-model-parallel-size", Arg::Value},
      {"num-layers-per-virtual-pipeline-stage", Arg::Value},
      {"num-virtual-stages-per-pipeline-rank", Arg::Value},
      {"pipeline-model-parallel-layout", Arg::Value},
      {"decoder-first-pipeline-num-layers", Arg::Value},
      {"decoder-last-pipeline-num-layers", Arg::Value},
      {"account-for-embedding-in-pipeline-split", Arg::Flag},
      {"account-for-loss-in-pipeline-split", Arg::Flag},
      {"context-parallel-size", Arg::Value},
      {"expert-model-parallel-size", Arg::Value},
      {"micro-batch-size", Arg::Value},
      {"global-batch-size", Arg::Value},
      {"seq-length", Arg::Value},
      {"sequence-parallel", Arg::Flag},
      {"use-distributed-optimizer", Arg::Flag},
      {"recompute-activations", Arg::Flag},
      {"recompute-granularity", Arg::Value},
      {"recompute-method", Arg::Value},
      {"recompute-num-layers", Arg::Value},
      {"num-layers", Arg::Value},
      {"hidden-size", Arg::Value},
      {"num-attention-heads", Arg::Value},
      {"group-query-attention", Arg::Flag},
      {"num-query-groups", Arg::Value},
      {"ffn-hidden-size", Arg::Value},
      {"kv-channels", Arg::Value},
      {"vocab-size", Arg::Value},
      {"make-vocab-size-divisible-by", Arg::Value},
      {"swiglu", Arg::Flag},
      {"untie-embeddings-and-output-weights", Arg::Flag},
      {"disable-bias-linear", Arg::Flag},
      {"normalization", Arg::Value},
      {"position-embedding-type", Arg::Value},
      {"use-rotary-position-embeddings", Arg::Flag},
      {"attention-dropout", Arg::Value},
      {"hidden-dropout", Arg::Value},
      {"bf16", Arg::Flag},
      {"fp16", Arg::Flag},
      {"overlap-grad-reduce", Arg::Flag},
      {"overlap-param-gather", Arg::Flag},
      {"use-flash-attn", Arg::Flag},
      {"attention-backend", Arg::Value},
      {"tp-comm-overlap", Arg::Flag},
      {"no-async-tensor-model-parallel-allreduce", Arg::Flag},
      {"fp8-format", Arg::Value},
      // Mixture of Experts (megatron/core/transformer/transformer_config.py's moe_* fields)
      {"num-experts", Arg::Value},
      {"moe-router-topk", Arg::Value},
      {"moe-ffn-hidden-size", Arg::Value},
      {"moe-shared-expert-intermediate-size", Arg::Value},
      {"moe-layer-freq", Arg::Value},
      {"expert-tensor-parallel-size", Arg::Value},
      {"moe-token-dispatcher-type", Arg::Value},
      {"moe-flex-dispatcher-backend", Arg::Value},
      {"moe-enable-deepep", Arg::Flag},
      {"moe-grouped-gemm", Arg::Flag},
      {"overlap-moe-expert-parallel-comm", Arg::Flag},
      {"delay-wgrad-compute", Arg::Flag},
      {"moe-expert-capacity-factor", Arg::Value},
      {"moe-pad-expert-input-to-capacity", Arg::Flag},
      {"moe-router-num-groups", Arg::Value},
      {"moe-router-group-topk", Arg::Value},
      // multi-head latent attention (MLATransformerConfig)
      {"multi-latent-attention", Arg::Flag},
      {"q-lora-rank", Arg::Value},
      {"kv-lora-rank", Arg::Value},
      {"qk-head-dim", Arg::Value},
      {"qk-pos-emb-head-dim", Arg::Value},
      {"v-head-dim", Arg::Value},
  };
  return m;
}

// Flags that change nothing trainsim predicts for one step (data, logging, checkpoints, the learning rate...).
const std::set<std::string>& megatron_ignored() {
  static const std::set<std::string> s = {
      "lr", "min-lr", "lr-decay-style", "lr-decay-iters", "lr-decay-samples", "lr-warmup-iters", "lr-warmup-fraction",
      "lr-warmup-samples", "lr-warmup-init", "train-iters", "train-samples", "weight-decay", "clip-grad", "adam-beta1",
      "adam-beta2", "adam-eps", "init-method-std", "seed", "log-interval", "save-interval", "eval-interval",
      "eval-iters", "save", "load", "data-path", "split", "mock-data", "tokenizer-type", "tokenizer-model",
      "vocab-file", "merge-file", "tensorboard-dir", "distributed-backend", "use-mcore-models", "transformer-impl",
      "max-position-embeddings", "num-workers", "log-throughput", "exit-interval", "no-load-optim", "no-load-rng",
      "no-save-optim", "wandb-project", "wandb-exp-name", "rotary-base", "norm-epsilon", "attention-softmax-in-fp32",
      "no-masked-softmax-fusion", "no-bias-swiglu-fusion", "no-bias-dropout-fusion", "no-gradient-accumulation-fusion",
      "log-timers-to-tensorboard", "log-memory-to-tensorboard", "log-validation-ppl-to-tensorboard", "timing-log-level",
      "ckpt-format", "dataloader-type", "data-cache-path", "no-create-attention-mask-in-dataloader",
      // timeouts, logging, checkpointing, data, kernels' numerics and fusions that leave a step's work as modelled
      "distributed-timeout-minutes", "cross-entropy-loss-fusion", "cross-entropy-fusion-impl", "log-params-norm",
      "log-num-zeros-in-grad", "log-world-size-to-tensorboard", "logging-level", "timing-log-option", "manual-gc",
      "manual-gc-interval", "manual-gc-eval", "check-for-nan-in-loss-and-grad", "no-check-for-nan-in-loss-and-grad",
      "eod-mask-loss", "reset-position-ids", "reset-attention-mask", "deterministic-mode", "exit-duration-in-mins",
      "exit-signal-handler", "async-save", "use-dist-ckpt", "dist-ckpt-format", "auto-detect-ckpt-format",
      "use-checkpoint-args", "finetune", "pretrained-checkpoint", "no-initialization", "use-cpu-initialization",
      "profile", "profile-step-start", "profile-step-end", "profile-ranks", "nccl-communicator-config-path",
      "rerun-mode", "wandb-save-dir", "tensorboard-log-interval", "tensorboard-queue-size", "valid-data-path",
      "train-data-path", "test-data-path", "data-args-path", "per-split-data-args-path", "object-storage-cache-path",
      "tokenizer-model", "null-tokenizer-vocab-size", "bias-gelu-fusion", "no-bias-gelu-fusion", "masked-softmax-fusion",
      "bias-dropout-fusion", "apply-query-key-layer-scaling", "no-persist-layer-norm", "persist-layer-norm",
      "apply-layernorm-1p", "fp8-amax-history-len", "fp8-amax-compute-algo", "fp8-margin", "fp8-interval",
      "fp8-recipe", "no-fp8-wgrad", "cp-comm-type", "tp-comm-overlap-cfg", "tp-comm-bulk-dgrad", "tp-comm-bulk-wgrad",
      "no-tp-comm-bulk-dgrad", "no-tp-comm-bulk-wgrad", "tp-comm-overlap-ag", "tp-comm-overlap-rs",
      "tp-comm-split-ag", "tp-comm-split-rs", "overlap-p2p-communication", "align-grad-reduce", "align-param-gather",
      "ddp-bucket-size", "ddp-average-in-collective", "accumulate-allreduce-grads-in-fp32", "gradient-accumulation-fusion",
      "calculate-per-token-loss", "defer-embedding-wgrad-compute", "wgrad-deferral-limit", "empty-unused-memory-level",
      "no-rope-fusion", "rope-scaling-factor", "use-rope-scaling",
      // the router's numerics and losses, and fusions of the MoE layer's permutations (a step's work as modelled)
      "moe-router-load-balancing-type", "moe-aux-loss-coeff", "moe-z-loss-coeff", "moe-router-score-function",
      "moe-router-enable-expert-bias", "moe-router-bias-update-rate", "moe-router-topk-scaling-factor",
      "moe-router-pre-softmax", "moe-router-dtype", "moe-permute-fusion", "moe-router-fusion", "moe-token-drop-policy",
      "moe-input-jitter-eps", "moe-per-layer-logging", "qk-layernorm"};
  return s;
}

constexpr const char* kMegatronDoc = "docs/frameworks.md, Megatron-LM";

std::string meg(const std::string& name) { return "--from-megatron: --" + name; }

// --moe-layer-freq as Megatron-LM's moe_freq_type reads it: an integer k (layer i has experts when i % k == 0) or
// a Python list expression of a 0 or 1 per layer ("([0]*3+[1]*58)", "[0,1,1,1]"), quoted or not. Returns the
// dense blocks before the first MoE one; refuses a pattern trainsim's models cannot hold (their dense blocks come
// first, the rest all have experts) and text that is neither form.
int moe_dense_blocks(const std::string& given, int layers) {
  std::string t;
  for (char ch : given)
    if (!std::isspace(static_cast<unsigned char>(ch)) && ch != '\'' && ch != '"') t += ch;
  const std::string bad = fmt::format("{} '{}' is an integer or a list expression such as ([0]*3+[1]*58)",
                                      meg("moe-layer-freq"), given);
  if (!t.empty() && std::all_of(t.begin(), t.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
    if (t.size() > 9) refuse(bad);
    const int k = std::stoi(t);
    if (k == 1) return 0;
    refuse(fmt::format("{} {}: experts in every {}th layer are not modelled (trainsim's MoE models have their dense "
                       "blocks first; write the pattern as a list, e.g. ([0]*3+[1]*58))",
                       meg("moe-layer-freq"), k, k));
  }
  while (t.size() >= 2 && t.front() == '(' && t.back() == ')') t = t.substr(1, t.size() - 2);
  std::vector<int> pattern;
  std::size_t at = 0;
  while (at < t.size()) {
    if (t[at] != '[') refuse(bad);
    const std::size_t close = t.find(']', at);
    if (close == std::string::npos) refuse(bad);
    std::vector<int> items;
    for (std::size_t i = at + 1; i < close; ++i) {
      if (t[i] == ',') continue;
      if (t[i] != '0' && t[i] != '1') refuse(bad);
      if (i + 1 < close && t[i + 1] != ',') refuse(bad);
      items.push_back(t[i] - '0');
    }
    at = close + 1;
    long long times = 1;
    if (at < t.size() && t[at] == '*') {
      std::size_t end = at + 1;
      while (end < t.size() && std::isdigit(static_cast<unsigned char>(t[end]))) ++end;
      if (end == at + 1 || end - at > 10) refuse(bad);  // (at most 9 digits: no overflow below)
      times = std::stoll(t.substr(at + 1, end - at - 1));
      at = end;
    }
    if (static_cast<long long>(pattern.size()) + times * static_cast<long long>(items.size()) > layers) {
      refuse(fmt::format("{} '{}' gives more layers than --num-layers {} (Megatron-LM refuses it too)",
                         meg("moe-layer-freq"), given, layers));
    }
    for (long long n = 0; n < times; ++n) pattern.insert(pattern.end(), items.begin(), items.end());
    if (at < t.size()) {
      if (t[at] != '+' || at + 1 == t.size()) refuse(bad);  // (a '+' joins two lists)
      ++at;
    }
  }
  if (static_cast<int>(pattern.size()) != layers)
    refuse(fmt::format("{} '{}' gives {} layers, not --num-layers {} (Megatron-LM refuses it too)", meg("moe-layer-freq"),
                       given, pattern.size(), layers));
  const int dense = static_cast<int>(std::find(pattern.begin(), pattern.end(), 1) - pattern.begin());
  if (std::find(pattern.begin() + dense, pattern.end(), 0) != pattern.end())
    refuse(fmt::format("{} '{}': a dense layer after an MoE layer is not modelled (trainsim's MoE models have their "
                       "dense blocks first)",
                       meg("moe-layer-freq"), given));
  if (dense == layers) refuse(fmt::format("{} '{}' has no MoE layer", meg("moe-layer-freq"), given));
  return dense;
}

// The multi-head latent attention flags applied to `m`: each one given sets its field (trainsim assumes none of
// MLATransformerConfig's defaults: a model without MLA needs --kv-lora-rank with --multi-latent-attention).
void read_megatron_mla(const Flags& f, hw::ModelSpec& m) {
  const std::string fw = "megatron";
  const char* fields[] = {"q-lora-rank", "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim"};
  if (!flag(f, "multi-latent-attention")) {
    for (const char* n : fields)
      if (f.has(n)) refuse(meg(n) + " goes with --multi-latent-attention");
    return;
  }
  if (!m.mla() && !f.has("kv-lora-rank"))
    refuse(meg("multi-latent-attention") + " on a model without it needs --kv-lora-rank (and --q-lora-rank, "
           "--qk-head-dim, --qk-pos-emb-head-dim, --v-head-dim: trainsim assumes none of Megatron-LM's defaults)");
  if (f.has("q-lora-rank")) m.q_lora_rank = static_cast<int>(integer(f, fw, "q-lora-rank", 0, 0));
  if (f.has("kv-lora-rank")) m.kv_lora_rank = static_cast<int>(integer(f, fw, "kv-lora-rank", 1));
  if (f.has("qk-head-dim")) m.head_channels = static_cast<int>(integer(f, fw, "qk-head-dim", 1));
  if (f.has("qk-pos-emb-head-dim")) m.rope_head_dim = static_cast<int>(integer(f, fw, "qk-pos-emb-head-dim", 1));
  if (f.has("v-head-dim")) m.v_head_dim = static_cast<int>(integer(f, fw, "v-head-dim", 1));
}

// The MoE flags applied to `m` (the experts, their width, the router's k, shared experts, the dense blocks).
void read_megatron_moe(const Flags& f, hw::ModelSpec& m, FrameworkPlan& plan) {
  const std::string fw = "megatron";
  if (f.has("num-experts")) m.experts = static_cast<int>(integer(f, fw, "num-experts", 1));
  for (const char* n : {"moe-router-topk", "moe-ffn-hidden-size", "moe-shared-expert-intermediate-size", "moe-layer-freq",
                        "moe-grouped-gemm", "moe-token-dispatcher-type", "moe-flex-dispatcher-backend", "moe-enable-deepep",
                        "moe-expert-capacity-factor", "moe-pad-expert-input-to-capacity", "moe-router-num-groups",
                        "moe-router-group-topk", "expert-tensor-parallel-size"})
    if (f.has(n) && !m.moe())
      refuse(fmt::format("{} needs experts: give --num-experts (or gen --model with an MoE preset)", meg(n)));
  if (!m.moe()) return;
  // With --num-experts the flags describe the MoE layer, Megatron-LM's defaults for the rest (top-2, experts of
  // --ffn-hidden-size, no shared expert, experts in every layer); without it they change gen --model's.
  if (f.has("num-experts"))
    m.top_k = 2, m.expert_ffn = 0, m.shared_experts = 0, m.dense_blocks = 0, m.router_groups = 0, m.router_group_topk = 0;
  if (f.has("moe-router-topk")) m.top_k = static_cast<int>(integer(f, fw, "moe-router-topk", 2));
  if (f.has("moe-ffn-hidden-size")) m.expert_ffn = static_cast<int>(integer(f, fw, "moe-ffn-hidden-size", 1));
  if (f.has("moe-shared-expert-intermediate-size")) {
    const long long shared = integer(f, fw, "moe-shared-expert-intermediate-size", 0, 0);
    if (shared % m.expert_width() != 0)
      refuse(fmt::format("{} {} is not a whole number of experts of width {} (trainsim's shared experts are routed "
                         "experts' width)",
                         meg("moe-shared-expert-intermediate-size"), shared, m.expert_width()));
    m.shared_experts = static_cast<int>(shared / m.expert_width());
  }
  if (f.has("moe-layer-freq")) m.dense_blocks = moe_dense_blocks(text(f, "moe-layer-freq", "1"), m.blocks);
  // Token dropping: an expert's capacity, and the padding to it (Megatron-LM refuses the padding without one).
  m.capacity_factor = 0, m.pad_to_capacity = false;
  if (f.has("moe-expert-capacity-factor")) {
    const double cf = number(f, fw, "moe-expert-capacity-factor", 0);
    if (!(cf >= 0.01 && cf <= 1000))
      refuse(fmt::format("{} {}: the capacity is 0.01 to 1000 times an expert's balanced share of the tokens",
                         meg("moe-expert-capacity-factor"), cf));
    m.capacity_factor = cf;
  }
  if (flag(f, "moe-pad-expert-input-to-capacity")) {
    if (m.capacity_factor <= 0)
      refuse(meg("moe-pad-expert-input-to-capacity") + " needs --moe-expert-capacity-factor (Megatron-LM refuses it too)");
    m.pad_to_capacity = true;
  }
  if (!flag(f, "moe-grouped-gemm"))
    plan.notes.push_back("the experts' GEMMs timed as grouped GEMMs (--moe-grouped-gemm); without it Megatron-LM runs "
                         "a rank's experts one after another");
  // Group-limited routing (DeepSeek-V3's node-limited routing): the model's router_groups and router_group_topk.
  if (f.has("moe-router-num-groups") != f.has("moe-router-group-topk"))
    refuse(fmt::format("{} goes with --{} (Megatron-LM needs both for group-limited routing)",
                       meg(f.has("moe-router-num-groups") ? "moe-router-num-groups" : "moe-router-group-topk"),
                       f.has("moe-router-num-groups") ? "moe-router-group-topk" : "moe-router-num-groups"));
  if (f.has("moe-router-num-groups")) {
    m.router_groups = static_cast<int>(integer(f, fw, "moe-router-num-groups", 1));
    m.router_group_topk = static_cast<int>(integer(f, fw, "moe-router-group-topk", 1));
    if (m.router_groups == 1) m.router_groups = 0, m.router_group_topk = 0;  // (one group: no restriction)
  }
}

// The blocks of each of `stages` stage chunks when Megatron-LM splits them itself.
std::vector<int> megatron_split(const Flags& f, int blocks, int p, int v, FrameworkPlan& plan) {
  const int stages = p * v;
  const bool emb = flag(f, "account-for-embedding-in-pipeline-split"),
             loss = flag(f, "account-for-loss-in-pipeline-split");
  const bool first_given = f.has("decoder-first-pipeline-num-layers"), last_given = f.has("decoder-last-pipeline-num-layers");
  if (first_given || last_given) {
    if (v > 1)
      refuse(meg("decoder-first-pipeline-num-layers") +
             " with virtual pipeline stages is not generated (write the split as --pipeline-model-parallel-layout)");
    if (emb || loss)
      refuse(meg("account-for-embedding-in-pipeline-split") +
             " goes without --decoder-first/last-pipeline-num-layers (Megatron-LM refuses the two together)");
    if (p < 2) refuse(meg("decoder-first-pipeline-num-layers") + " needs --pipeline-model-parallel-size 2 or more");
    const int first = static_cast<int>(integer(f, "megatron", "decoder-first-pipeline-num-layers", -1, 0));
    const int last = static_cast<int>(integer(f, "megatron", "decoder-last-pipeline-num-layers", -1, 0));
    const int fixed = (first_given ? 1 : 0) + (last_given ? 1 : 0);
    const int rest = blocks - std::max(first, 0) - std::max(last, 0), middle = p - fixed;
    if (rest < 0 || (middle == 0 ? rest != 0 : rest % middle != 0))
      refuse(fmt::format("--from-megatron: the {} layers less the first and last stages' ({} and {}) do not split "
                         "evenly over the other {} stages (Megatron-LM refuses it too)",
                         blocks, first_given ? std::to_string(first) : "even", last_given ? std::to_string(last) : "even",
                         middle));
    std::vector<int> out(p, middle == 0 ? 0 : rest / middle);
    if (first_given) out.front() = first;
    if (last_given) out.back() = last;
    return out;
  }
  const int total = blocks + (emb ? 1 : 0) + (loss ? 1 : 0);
  if (total % stages != 0)
    refuse(fmt::format("--from-megatron: --num-layers {}{} does not divide into {} stage chunks (--pipeline-model-parallel-"
                       "size {} x {} virtual stages); Megatron-LM refuses it too: give --decoder-first/last-pipeline-num-"
                       "layers or --pipeline-model-parallel-layout",
                       blocks, emb || loss ? fmt::format(" (+{} for the embedding and loss)", total - blocks) : "", stages,
                       p, v));
  std::vector<int> out(stages, total / stages);
  if (emb) out.front() -= 1;
  if (loss) out.back() -= 1;
  if (out.front() < 0 || out.back() < 0) refuse("--from-megatron: the embedding or the loss leaves a stage with fewer than no layers");
  if (emb || loss) plan.notes.push_back("the embedding and the loss count as a layer each in the stage split (Megatron-LM's "
                                        "--account-for-embedding/loss-in-pipeline-split)");
  return out;
}

}  // namespace

FrameworkPlan from_megatron(const std::string& args, const FrameworkInputs& in) {
  const Flags f = read_flags(args, "megatron", megatron_flags(), megatron_ignored(), {}, as_is, kMegatronDoc);
  FrameworkPlan plan;
  const std::string fw = "megatron";
  const int t = static_cast<int>(integer(f, fw, "tensor-model-parallel-size", 1));
  const int p = static_cast<int>(integer(f, fw, "pipeline-model-parallel-size", 1));
  const int c = static_cast<int>(integer(f, fw, "context-parallel-size", 1));
  const int e = static_cast<int>(integer(f, fw, "expert-model-parallel-size", 1));
  if (!f.has("micro-batch-size")) refuse(meg("micro-batch-size") + " is required (Megatron-LM requires it too)");
  const int b = static_cast<int>(integer(f, fw, "micro-batch-size", 1));
  const int d = in.dp;
  note_dp(in, "Megatron-LM", plan);
  const long long global = integer(f, fw, "global-batch-size", static_cast<long long>(b) * d);
  if (global % (static_cast<long long>(b) * d) != 0)
    refuse(fmt::format("--from-megatron: --global-batch-size {} is not a multiple of --micro-batch-size {} x the "
                       "data-parallel degree {}",
                       global, b, d));
  const int microbatches = static_cast<int>(global / (static_cast<long long>(b) * d));
  if (!flag(f, "bf16") && !flag(f, "fp16"))
    refuse("--from-megatron: give --bf16 or --fp16: trainsim models mixed-precision training (Megatron-LM trains in "
           "fp32 without them)");

  // The model: gen --model with the flags given applied, or one built from the flags with Megatron-LM's defaults.
  const bool custom = !in.model;
  hw::ModelSpec m = custom ? hw::model_preset("custom") : *in.model;
  if (custom) {
    for (const char* need : {"num-layers", "hidden-size", "num-attention-heads", "vocab-size"})
      if (!f.has(need))
        refuse(fmt::format("--from-megatron: --{} is needed to describe the model (or give gen --model PRESET){}", need,
                           std::string(need) == "vocab-size" ? "; Megatron-LM takes it from the tokenizer" : ""));
    m.preset = "custom";
  }
  if (f.has("num-layers")) m.blocks = static_cast<int>(integer(f, fw, "num-layers", 1));
  if (f.has("hidden-size")) m.hidden = static_cast<int>(integer(f, fw, "hidden-size", 1));
  if (f.has("num-attention-heads")) m.heads = static_cast<int>(integer(f, fw, "num-attention-heads", 1));
  if (custom || f.has("group-query-attention") || f.has("num-query-groups"))
    m.kv_heads = flag(f, "group-query-attention") ? static_cast<int>(integer(f, fw, "num-query-groups", 1)) : m.heads;
  if (f.has("swiglu") || custom) m.gated_ffn = flag(f, "swiglu");
  if (f.has("ffn-hidden-size")) m.ffn = static_cast<int>(integer(f, fw, "ffn-hidden-size", 1));
  else if (custom) m.ffn = m.gated_ffn ? static_cast<int>(4.0 * m.hidden * 2 / 3 / 64) * 64 : 4 * m.hidden;
  if (f.has("kv-channels")) {  // a head's channels (Qwen3: 128 where hidden / heads is 64)
    const long long k = integer(f, fw, "kv-channels", 1);
    m.head_channels = k * m.heads == m.hidden ? 0 : static_cast<int>(k);
  }
  if (f.has("vocab-size") || f.has("make-vocab-size-divisible-by")) {
    // Megatron-LM pads the vocabulary to a multiple of make-vocab-size-divisible-by x TP (vocab_utils.py).
    const long long v = f.has("vocab-size") ? integer(f, fw, "vocab-size", 1) : m.vocab;
    const long long multiple = integer(f, fw, "make-vocab-size-divisible-by", 128) * t;  // (< 2^31 x 2^31: no overflow)
    const long long padded = (v + multiple - 1) / multiple * multiple;
    if (padded > std::numeric_limits<int>::max())
      refuse(fmt::format("--from-megatron: the vocabulary {} padded to a multiple of {} (--make-vocab-size-divisible-by "
                         "x TP {}) is {}, more than a model may have ({})",
                         v, multiple, t, padded, std::numeric_limits<int>::max()));
    m.vocab = static_cast<int>(padded);
    if (m.vocab != v) plan.notes.push_back(fmt::format("vocabulary {} padded to {} (a multiple of {}), as Megatron-LM pads it", v, m.vocab, multiple));
  }
  if (f.has("untie-embeddings-and-output-weights") || custom) m.tied_embeddings = !flag(f, "untie-embeddings-and-output-weights");
  if (f.has("disable-bias-linear") || custom) m.bias = !flag(f, "disable-bias-linear");
  if (f.has("normalization") || custom) {
    const std::string n = text(f, "normalization", "LayerNorm");
    if (n != "LayerNorm" && n != "RMSNorm") refuse(meg("normalization") + " is LayerNorm or RMSNorm, not '" + n + "'");
    m.layernorm = n == "LayerNorm";
  }
  if (f.has("position-embedding-type") || f.has("use-rotary-position-embeddings") || custom) {
    const std::string pe = flag(f, "use-rotary-position-embeddings") ? "rope" : text(f, "position-embedding-type", "learned_absolute");
    if (pe != "learned_absolute" && pe != "rope" && pe != "none")
      refuse(meg("position-embedding-type") + " '" + pe + "' is not modelled (learned_absolute, rope or none)");
    m.learned_positions = pe == "learned_absolute";
  }
  if (f.has("attention-dropout") || f.has("hidden-dropout") || custom)  // Megatron-LM's defaults: 0.1 each
    m.dropout = number(f, fw, "attention-dropout", 0.1) > 0 || number(f, fw, "hidden-dropout", 0.1) > 0;
  if (f.has("seq-length")) plan.seq = static_cast<int>(integer(f, fw, "seq-length", 1));
  if (custom) m.seq = plan.seq > 0 ? plan.seq : 2048;
  if (flag(f, "bf16")) {
    // Megatron-LM sets accumulate_allreduce_grads_in_fp32 with --bf16: its grads are fp32 (main_grad).
    m.grad_bytes = 4;
    plan.notes.push_back("weight grads in fp32, as Megatron-LM accumulates and all-reduces them with --bf16");
  }
  read_megatron_moe(f, m, plan);
  read_megatron_mla(f, m);
  try {
    m.validate("--from-megatron");
  } catch (const hw::SpecError& e) {
    refuse(e.what());
  }
  plan.model = m;
  plan.microbatch_size = b;

  // Recomputation.
  if (flag(f, "recompute-activations")) plan.recompute = hw::Recompute::Selective;
  const std::string granularity = text(f, "recompute-granularity", "");
  if (granularity == "selective") {
    plan.recompute = hw::Recompute::Selective;
  } else if (granularity == "full") {
    const std::string method = text(f, "recompute-method", "");
    const long long n = integer(f, fw, "recompute-num-layers", 1, 0);
    if (method == "uniform") {
      plan.recompute = hw::Recompute::Full;
      if (n > 1)
        plan.notes.push_back(fmt::format("--recompute-method uniform --recompute-num-layers {}: every block recomputed "
                                         "(Megatron-LM keeps the input of every {} blocks, trainsim each block's)",
                                         n, n));
    } else if (method == "block") {
      if (n == 0) plan.recompute = hw::Recompute::None;
      else plan.recompute = hw::Recompute::Full;  // checked against the blocks per stage below
    } else {
      refuse(meg("recompute-granularity") + " full needs --recompute-method uniform or block (Megatron-LM requires it too)");
    }
  } else if (!granularity.empty()) {
    refuse(meg("recompute-granularity") + " is full or selective, not '" + granularity + "'");
  }

  // The pipeline: stages, virtual stages and the layers of each.
  int v = 1;
  const int given = (f.has("num-layers-per-virtual-pipeline-stage") ? 1 : 0) +
                    (f.has("num-virtual-stages-per-pipeline-rank") ? 1 : 0) + (f.has("pipeline-model-parallel-layout") ? 1 : 0);
  if (given > 1)
    refuse("--from-megatron: no more than one of --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-"
           "pipeline-rank and --pipeline-model-parallel-layout (Megatron-LM refuses more)");
  std::vector<int> blocks;
  if (f.has("pipeline-model-parallel-layout")) {
    const std::string text_layout = text(f, "pipeline-model-parallel-layout", "");
    hw::StageLayout layout;
    try {
      layout = hw::StageLayout::parse(text_layout);
    } catch (const hw::LayoutError& e) {
      refuse(fmt::format("--from-megatron: --pipeline-model-parallel-layout '{}': {}", shown(text_layout), e.what()));
    }
    if (layout.layers() % p != 0)
      refuse(fmt::format("--from-megatron: --pipeline-model-parallel-layout '{}' has {} stages, not a multiple of "
                         "--pipeline-model-parallel-size {}",
                         shown(text_layout), layout.layers(), p));
    if (layout.blocks() != m.blocks)
      refuse(fmt::format("--from-megatron: --pipeline-model-parallel-layout '{}' holds {} layers but the model has {}",
                         shown(text_layout), layout.blocks(), m.blocks));
    v = layout.layers() / p;
    blocks = layout.blocks_per_layer();
  } else {
    if (f.has("num-virtual-stages-per-pipeline-rank")) v = static_cast<int>(integer(f, fw, "num-virtual-stages-per-pipeline-rank", 1));
    if (f.has("num-layers-per-virtual-pipeline-stage")) {
      const long long k = integer(f, fw, "num-layers-per-virtual-pipeline-stage", 1);
      const long long total = m.blocks + (flag(f, "account-for-embedding-in-pipeline-split") ? 1 : 0) +
                              (flag(f, "account-for-loss-in-pipeline-split") ? 1 : 0);
      if (total % p != 0 || (total / p) % k != 0)
        refuse(fmt::format("--from-megatron: --num-layers-per-virtual-pipeline-stage {}: the {} layers per stage do not "
                           "split into chunks of {} (Megatron-LM refuses it too)",
                           k, total / p, k));
      v = static_cast<int>(total / p / k);
    }
    if (p > 1) blocks = megatron_split(f, m.blocks, p, v, plan);
  }
  if (v > 1 && p == 1) refuse(meg("num-virtual-stages-per-pipeline-rank") + ": virtual pipeline stages need --pipeline-model-parallel-size 2 or more");
  if (p == 1 && (f.has("decoder-first-pipeline-num-layers") || f.has("decoder-last-pipeline-num-layers")))
    refuse(meg("decoder-first-pipeline-num-layers") + " needs --pipeline-model-parallel-size 2 or more");
  if (granularity == "full" && text(f, "recompute-method", "") == "block") {
    const long long n = integer(f, fw, "recompute-num-layers", 1, 0);
    const int most = blocks.empty() ? m.blocks : *std::max_element(blocks.begin(), blocks.end());
    if (n > 0 && n < most)
      refuse(fmt::format("--from-megatron: --recompute-method block --recompute-num-layers {} recomputes {} of the {} "
                         "layers of a stage: trainsim recomputes all of them or none (--recompute-num-layers 0 or {})",
                         n, n, most, most));
  }

  // gen 3d: TP x CP x DP x PP in Megatron-LM's rank order.
  plan.kind = "3d";
  GenOptions& o = plan.options;
  o.tp = t, o.pp = p, o.dp = d, o.chunks = v, o.cp = c;
  o.schedule = v > 1 ? "interleaved-1f1b" : "1f1b";
  o.microbatches = microbatches;
  o.sequence_parallel = flag(f, "sequence-parallel") && t > 1;
  o.zero = flag(f, "use-distributed-optimizer") ? 1 : 0;
  // One schedule layer per block: the stage chunks' blocks (Megatron-LM's split or the layout's).
  if (p > 1) o.chunk_blocks = blocks;
  else o.layers = m.blocks;
  // Expert parallelism in Megatron-Core's expert order etp-ep-edp-pp over each stage's TP x CP x DP ranks (its expert
  // ranks ignore the dense CP split): with expert TP 1 EP groups of e consecutive ranks (whole TP groups); with
  // expert TP equal to TP (Megatron-LM's default) EP groups of one TP index of e consecutive TP groups.
  if (e > 1 && !m.moe()) refuse(meg("expert-model-parallel-size") + " above 1 needs experts: give --num-experts");
  if (m.moe()) {
    // Megatron-LM's expert TP defaults to the TP size.
    const int etp = integer(f, fw, "expert-tensor-parallel-size", t);
    const std::string etp_said =
        fmt::format("--expert-tensor-parallel-size {}{}", etp,
                    f.has("expert-tensor-parallel-size") ? "" : " (Megatron-LM's default: the TP size)");
    if (etp != 1 && etp != t)
      refuse(fmt::format("--from-megatron: {}: trainsim models expert TP 1 (the experts whole beside TP) or equal to "
                         "the TP size {}",
                         etp_said, t));
    // (EP 1 with expert TP equal to TP: every expert on every TP rank, split over the TP group, as a dense MLP)
    if (t > 1 && e == 1 && etp == 1)
      refuse(fmt::format("{} {} with experts, no expert parallelism and --expert-tensor-parallel-size 1: every "
                         "expert whole on every TP rank is not modelled (give --expert-model-parallel-size above 1, "
                         "or leave the expert TP at the TP size)",
                         meg("tensor-model-parallel-size"), t));
    if (t > 1 && !o.sequence_parallel)
      refuse(fmt::format("{} {} with experts needs --sequence-parallel (Megatron-LM refuses MoE with TP without it)",
                         meg("tensor-model-parallel-size"), t));
    if (m.experts % e != 0)
      refuse(fmt::format("{} {} does not divide --num-experts {} (Megatron-LM refuses it too)",
                         meg("expert-model-parallel-size"), e, m.experts));
    if ((static_cast<long long>(t) * c % e) * d % e != 0)  // (t x c x d mod e, no overflow: each below 2^31)
      refuse(fmt::format("{} {} does not divide the tensor- x context- x data-parallel degree {} x {} x {}: Megatron-LM "
                         "carves the EP groups out of those ranks",
                         meg("expert-model-parallel-size"), e, t, c, d));
    if (t > 1 && etp == 1 && e % t != 0)
      refuse(fmt::format("{} {} is not a multiple of the TP size {}: with expert TP 1 trainsim's EP groups hold whole "
                         "TP groups (or leave --expert-tensor-parallel-size at the TP size)",
                         meg("expert-model-parallel-size"), e, t));
    if (etp > 1 && (static_cast<long long>(c) * d) % e != 0)
      refuse(fmt::format("{} {} with {}: the EP degree must divide the context- x data-parallel degree {} x {} "
                         "(Megatron-LM needs expert TP x EP to divide TP x CP x DP)",
                         meg("expert-model-parallel-size"), e, etp_said, c, d));
    if (e > 1) o.etp = etp;
    if (e > 1) {
      o.ep = e;
      o = model_dense_layers("3d", o, m.blocks, m.dense_blocks);
      const std::string dispatcher = text(f, "moe-token-dispatcher-type", "");
      if (dispatcher == "allgather")
        refuse(fmt::format("{} {}: trainsim times the alltoall dispatcher's two all-to-alls, or the flex dispatcher's "
                           "DeepEP (give --moe-token-dispatcher-type alltoall or flex)",
                           meg("moe-token-dispatcher-type"), dispatcher));
      if (!dispatcher.empty() && dispatcher != "alltoall" && dispatcher != "flex")
        refuse(meg("moe-token-dispatcher-type") + " is alltoall, allgather or flex, not '" + dispatcher + "'");
      // The flex dispatcher: DeepEP (Megatron-LM's default backend, or the older --moe-enable-deepep), or HybridEP,
      // NVIDIA's branch of DeepEP, hierarchical as it is.
      if (dispatcher == "flex") {
        const std::string backend = text(f, "moe-flex-dispatcher-backend", "deepep");
        if (backend != "deepep" && backend != "hybridep")
          refuse(meg("moe-flex-dispatcher-backend") + " is deepep or hybridep, not '" + backend + "'");
        plan.moe_dispatcher = hw::MoeDispatcher::DeepEP;
        if (backend == "hybridep")
          plan.notes.push_back("--moe-flex-dispatcher-backend hybridep timed as DeepEP's hierarchical dispatch (HybridEP "
                               "is NVIDIA's branch of it)");
      } else if (f.has("moe-flex-dispatcher-backend") || flag(f, "moe-enable-deepep")) {
        refuse(meg(f.has("moe-flex-dispatcher-backend") ? "moe-flex-dispatcher-backend" : "moe-enable-deepep") +
               " needs --moe-token-dispatcher-type flex (Megatron-LM's flex dispatcher runs DeepEP)");
      }
      if (dispatcher.empty())
        plan.notes.push_back("the tokens dispatched by all-to-all (--moe-token-dispatcher-type alltoall); Megatron-LM's "
                             "default dispatcher is allgather");
      // Megatron-LM's combined 1F1B: a forward and a backward of other microbatches interleaved by sub-module.
      o.a2a_overlap = flag(f, "overlap-moe-expert-parallel-comm");
      if (o.a2a_overlap && p > 1 && v == 1)
        refuse(meg("overlap-moe-expert-parallel-comm") + " with pipeline parallelism needs virtual pipeline stages "
               "(Megatron-LM requires them: plain 1F1B would wait on each pair)");
      if (o.a2a_overlap && plan.recompute == hw::Recompute::Full)
        refuse(meg("overlap-moe-expert-parallel-comm") + " with full recomputation: Megatron-LM refuses the two together");
      if (flag(f, "delay-wgrad-compute"))
        plan.notes.push_back("--delay-wgrad-compute: accepted; the overlapped pair's backward computes its weight "
                             "grads in place (their delay, to hide more of the all-to-alls, is not modelled)");
    }
  }
  if ((flag(f, "overlap-moe-expert-parallel-comm") || flag(f, "delay-wgrad-compute")) && o.ep <= 1)
    refuse(fmt::format("{} overlaps expert parallelism's all-to-alls: it needs --expert-model-parallel-size above 1",
                       meg(flag(f, "overlap-moe-expert-parallel-comm") ? "overlap-moe-expert-parallel-comm"
                                                                        : "delay-wgrad-compute")));
  if (flag(f, "use-distributed-optimizer"))
    plan.notes.push_back("--use-distributed-optimizer as gen 3d --zero 1: optimizer state sharded over the data-parallel "
                         "group, the whole grad buffer kept; trainsim all-reduces the grads where Megatron-LM "
                         "reduce-scatters them");
  for (const char* n : {"overlap-grad-reduce", "overlap-param-gather"})
    if (flag(f, n))
      plan.notes.push_back(fmt::format("--{}: gen 3d runs the data-parallel collectives on their own stream, under the "
                                       "backward where the schedule allows",
                                       n));
  if (flag(f, "use-flash-attn")) plan.notes.push_back("--use-flash-attn: accepted; attention memory as the hardware model counts it");
  // The attention kernels: flash (and cuDNN's fused attention, auto's choice) or the unfused softmax.
  const std::string backend = text(f, "attention-backend", "auto");
  if (backend == "unfused" || backend == "local") plan.attention = hw::Attention::Eager;
  else if (backend != "auto" && backend != "flash" && backend != "fused")
    refuse(meg("attention-backend") + " is auto, flash, fused, unfused or local, not '" + backend + "'");
  // TP communication: asynchronous in the backward (Megatron-LM's default), every collective under its GEMM with
  // --tp-comm-overlap (TransformerEngine's userbuffers, which need --sequence-parallel), synchronous without the
  // asynchronous all-reduce.
  plan.tp_overlap = hw::TpOverlap::Backward;
  if (flag(f, "tp-comm-overlap")) {
    if (!o.sequence_parallel && t > 1)
      refuse(meg("tp-comm-overlap") + " needs --sequence-parallel (Megatron-LM refuses it without)");
    plan.tp_overlap = hw::TpOverlap::Full;
  }
  if (flag(f, "no-async-tensor-model-parallel-allreduce")) plan.tp_overlap = hw::TpOverlap::None;
  // FP8 (TransformerEngine's, per-tensor scaling): trainsim's FP8 linear layers.
  if (f.has("fp8-format")) {
    const std::string fmt8 = text(f, "fp8-format", "");
    if (fmt8 != "hybrid" && fmt8 != "e4m3")
      refuse(meg("fp8-format") + " is hybrid or e4m3, not '" + fmt8 + "'");
    plan.fp8 = true;
    plan.notes.push_back("--fp8-format " + fmt8 + ": FP8 linear layers (TransformerEngine's casts fused into the "
                         "kernels that make the operands), the LM head in BF16");
  }
  note_ignored(f, plan);
  return plan;
}

// ---- torchtitan -------------------------------------------------------------------------------------------

namespace {

// The flags a torchtitan TOML job configuration sets, in its order: `--SECTION.KEY=VALUE` for every key of every
// table (torchtitan's JobConfig reads the file the same way: a table per section), arrays joined with commas. The
// command line's flags follow and win. Throws std::invalid_argument naming the file and its line.
std::vector<std::string> toml_flags(const std::string& path, const std::string* text = nullptr) {
  toml::table root;
  try {
    root = text ? toml::parse(*text, path) : toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    refuse(fmt::format("--from-torchtitan: --job.config_file '{}': line {}: {}", path, e.source().begin.line,
                       e.description()));
  }
  std::vector<std::string> out;
  auto scalar = [](const toml::node& v) -> std::string {
    if (v.is_string()) return *v.value<std::string>();
    if (v.is_boolean()) return *v.value<bool>() ? "true" : "false";
    if (v.is_integer()) return std::to_string(*v.value<long long>());
    if (v.is_floating_point()) return fmt::format("{}", *v.value<double>());
    return "";
  };
  std::function<void(const toml::table&, const std::string&, int)> walk = [&](const toml::table& t, const std::string& prefix,
                                                                              int depth) {
    if (depth > 8) refuse(fmt::format("--from-torchtitan: --job.config_file '{}': tables nested deeper than 8", path));
    for (auto&& [key, v] : t) {
      const std::string name = prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
      if (const toml::table* sub = v.as_table()) {
        walk(*sub, name, depth + 1);
      } else if (const toml::array* a = v.as_array()) {
        std::string joined;
        for (const toml::node& e : *a) joined += (joined.empty() ? "" : ",") + scalar(e);
        out.push_back("--" + name + "=" + joined);
      } else {
        out.push_back("--" + name + "=" + scalar(v));
      }
    }
  };
  walk(root, "", 0);
  return out;
}

const std::map<std::string, Arg>& torchtitan_flags() {
  static const std::map<std::string, Arg> m = {
      {"model.name", Arg::Value},
      {"model.flavor", Arg::Value},
      {"model.converters", Arg::Value},
      {"training.local_batch_size", Arg::Value},
      {"training.global_batch_size", Arg::Value},
      {"training.seq_len", Arg::Value},
      {"training.mixed_precision_param", Arg::Value},
      {"training.mixed_precision_reduce", Arg::Value},
      {"training.enable_cpu_offload", Arg::Flag},
      {"parallelism.data_parallel_replicate_degree", Arg::Value},
      {"parallelism.data_parallel_shard_degree", Arg::Value},
      {"parallelism.fsdp_reshard_after_forward", Arg::Value},
      {"parallelism.tensor_parallel_degree", Arg::Value},
      {"parallelism.disable_loss_parallel", Arg::Flag},
      {"parallelism.enable_async_tensor_parallel", Arg::Flag},
      {"parallelism.pipeline_parallel_degree", Arg::Value},
      {"parallelism.pipeline_parallel_schedule", Arg::Value},
      {"parallelism.pipeline_parallel_microbatch_size", Arg::Value},
      {"parallelism.pipeline_parallel_layers_per_stage", Arg::Value},
      {"parallelism.pipeline_parallel_first_stage_less_layers", Arg::Value},
      {"parallelism.pipeline_parallel_last_stage_less_layers", Arg::Value},
      {"parallelism.context_parallel_degree", Arg::Value},
      {"parallelism.expert_parallel_degree", Arg::Value},
      {"parallelism.expert_tensor_parallel_degree", Arg::Value},
      {"parallelism.expert_parallel_comm_backend", Arg::Value},
      {"activation_checkpoint.mode", Arg::Value},
      {"activation_checkpoint.selective_ac_option", Arg::Value},
      {"compile.enable", Arg::Flag},
      {"optimizer.name", Arg::Value},
      {"float8.enable_fsdp_float8_all_gather", Arg::Flag},
      // The names of torchtitan's TOML files of 2024 (training.batch_size, training.compile), read as today's.
      {"training.batch_size", Arg::Value},
      {"training.compile", Arg::Flag},
  };
  return m;
}

const std::set<std::string>& torchtitan_ignored() {
  static const std::set<std::string> s = {
      "training.steps", "training.dataset", "training.dataset_path", "training.max_norm", "training.gc_freq",
      "training.gc_debug", "training.dtype", "model.hf_assets_path", "model.tokenizer_path",
      "model.print_after_conversion", "optimizer.lr", "optimizer.eps", "optimizer.weight_decay",
      "optimizer.implementation", "optimizer.early_step_in_backward", "compile.components", "compile.backend",
      "activation_checkpoint.preserve_rng_state", "activation_checkpoint.early_stop", "training.warmup_steps",
      "training.data_parallel_degree", "training.deterministic", "training.seed", "training.mixed_precision_param_dtype",
      "model.norm_type", "model.tokenizer", "optimizer.fused", "float8.precompute_float8_dynamic_scale_for_fsdp",
      "float8.force_recompute_fp8_weight_in_bwd", "float8.filter_fqns", "float8.recipe_name", "float8.emulate",
      "compile.model", "compile.loss"};
  return s;
}

const std::set<std::string>& torchtitan_ignored_sections() {
  static const std::set<std::string> s = {"job", "metrics", "profiling", "checkpoint", "lr_scheduler", "comm", "debug",
                                          "validation", "memory_estimation", "fault_tolerance", "experimental"};
  return s;
}

constexpr const char* kTorchtitanDoc = "docs/frameworks.md, torchtitan";

std::string tt(const std::string& name) { return "--from-torchtitan: --" + name; }

// torchtitan's generate_llm_fqn_per_model_part split (hardware/stage_layout.h, weighted_split); refused as
// torchtitan refuses it.
std::vector<int> torchtitan_split(int stages, int layers, int input_weight, int output_weight) {
  std::string why;
  std::vector<int> out = hw::weighted_split(layers, stages, input_weight, output_weight, &why);
  if (out.empty())
    refuse(fmt::format("--from-torchtitan: {} layers over {} pipeline stages with first/last_stage_less_layers {} and "
                       "{}: {} (torchtitan refuses it too)",
                       layers, stages, input_weight, output_weight, why));
  return out;
}

struct TtSchedule {
  const char* torchtitan;  // the name torch.distributed.pipelining's get_schedule_class knows
  const char* kind;        // trainsim's generator
  bool single;             // one stage per rank
};

const TtSchedule* tt_schedule(const std::string& name) {
  static const TtSchedule all[] = {{"1F1B", "1f1b", true},
                                   {"GPipe", "gpipe", true},
                                   {"Interleaved1F1B", "interleaved-1f1b", false},
                                   {"LoopedBFS", "looped-bfs", false},
                                   {"InterleavedZeroBubble", "interleaved-zb", false},
                                   {"ZBVZeroBubble", "zbv", false},
                                   {"DualPipeV", "dualpipev", false}};
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
  };
  for (const auto& s : all)
    if (lower(s.torchtitan) == lower(name)) return &s;
  return nullptr;
}

}  // namespace

namespace {
FrameworkPlan from_torchtitan_words(const std::vector<std::string>& all, const FrameworkInputs& in);
}  // namespace

FrameworkPlan from_torchtitan_toml(const std::string& toml_text, const FrameworkInputs& in) {
  const std::string name = "(TOML text)";
  return from_torchtitan_words(toml_flags(name, &toml_text), in);
}

const std::vector<TorchtitanFlavor>& torchtitan_flavors() {
  static const std::vector<TorchtitanFlavor> f = {
      {"llama3", "8B", "llama3-8b"},          {"llama3", "70B", "llama3-70b"},
      {"llama3", "405B", "llama3-405b"},      {"qwen3", "30B-A3B", "qwen3-30b-a3b"},
      {"qwen3", "235B-A22B", "qwen3-235b-a22b"}, {"deepseek_v3", "671B", "deepseek-v3"}};
  return f;
}

std::string torchtitan_flavor_words(const std::string& name) {
  // "A's x, y and z": each model's flavors, then the models joined the same way.
  auto join = [](const std::vector<std::string>& items) {
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i)
      out += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
    return out;
  };
  std::vector<std::string> models;
  const auto& all = torchtitan_flavors();
  for (std::size_t i = 0; i < all.size();) {
    std::vector<std::string> flavors;
    std::size_t j = i;
    for (; j < all.size() && std::string_view(all[j].name) == all[i].name; ++j) flavors.push_back(all[j].flavor);
    if (name.empty() || name == all[i].name) models.push_back(std::string(all[i].name) + "'s " + join(flavors));
    i = j;
  }
  return join(models);
}

FrameworkPlan from_torchtitan(const std::string& flags, const FrameworkInputs& in) {
  // A TOML job configuration (--job.config_file) first, the command line's flags over it, as torchtitan reads them.
  std::vector<std::string> words;
  try {
    words = split_words(flags);
  } catch (const std::invalid_argument& e) {
    refuse(fmt::format("--from-torchtitan: {}", e.what()));
  }
  std::vector<std::string> all, given;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    const std::string name = w.size() > 2 && w.compare(0, 2, "--") == 0 ? underscores(w.substr(2, w.find('=') - 2)) : "";
    if (name != "job.config_file") {
      given.push_back(words[i]);
      continue;
    }
    std::string path;
    if (words[i].find('=') != std::string::npos) path = words[i].substr(words[i].find('=') + 1);
    else if (i + 1 < words.size()) path = words[++i];
    if (path.empty()) refuse("--from-torchtitan: --job.config_file needs a value");
    all = toml_flags(path);
  }
  all.insert(all.end(), given.begin(), given.end());
  return from_torchtitan_words(all, in);
}

namespace {

// trainsim's preset for torchtitan's model `name` and `flavor`, or "" where there is none.
std::string torchtitan_preset(const std::string& name, const std::string& flavor) {
  for (const TorchtitanFlavor& f : torchtitan_flavors())
    if (name == f.name && flavor == f.flavor) return f.preset;
  return "";
}

// torchtitan's expert parallelism (torchtitan/distributed/parallel_dims.py): with expert TP 1 (its default) the
// EP mesh borrows all of TP and CP and part of the FSDP shards, [dp_shard_in_ep, cp, tp] with TP fastest, which is
// gen 3d --ep's folded layout (EP consecutive ranks of TP x CP x DP, a multiple of TP); the experts are FSDP-sharded
// over the rest of the shards (dp_shard_mod_ep), gen 3d --zero 3's expert-data-parallel group. Refuses what
// torchtitan refuses (its asserts), and what trainsim does not model: expert TP equal to TP. Its DeepEP backend is
// the deepep dispatcher.
void read_torchtitan_experts(const Flags& f, const hw::ModelSpec& m, int ep, int t, int c, int shard, FrameworkPlan& plan) {
  const std::string fw = "torchtitan";
  const int etp = static_cast<int>(integer(f, fw, "parallelism.expert_tensor_parallel_degree", 1));
  const std::string backend = text(f, "parallelism.expert_parallel_comm_backend", "standard");
  if (!m.moe()) {
    if (ep != 1)  // (torchtitan: "no effect for non-MoE models")
      plan.notes.push_back(fmt::format("--parallelism.expert_parallel_degree {}: no effect on a model without experts, "
                                       "as in torchtitan", ep));
    return;
  }
  plan.expert_gemm = hw::ExpertGemm::Grouped;  // (torchtitan's GroupedExperts: torch._grouped_mm, one kernel a layer)
  // (EP 1 with TP: torchtitan's TensorParallel of the experts, each split over the TP ranks on the gathered tokens,
  // as gen 3d --tp runs an MoE model's experts without EP)
  if (ep == 1) return;
  if (etp != 1 && etp != t)
    refuse(tt("parallelism.expert_tensor_parallel_degree") + fmt::format(" {}: torchtitan runs 1 or the TP degree ({})", etp, t));
  if (etp != 1)
    refuse(tt("parallelism.expert_tensor_parallel_degree") + fmt::format(" {} (the TP degree): torchtitan's expert TP "
           "gathers the sequence over the TP ranks first and routes every token on each (its all-to-alls carry TP "
           "times Megatron-Core's tokens), which trainsim does not model (it models Megatron-LM's expert TP); 1, "
           "torchtitan's default, keeps the experts whole", etp));
  if (backend != "standard" && backend != "deepep")
    refuse(tt("parallelism.expert_parallel_comm_backend") + " is standard or deepep, not '" + backend + "'");
  if (backend == "deepep") plan.moe_dispatcher = hw::MoeDispatcher::DeepEP;
  const long long ct = static_cast<long long>(c) * t;  // (degrees up to 2^31 each: no int overflow)
  if (ep % ct != 0 || (static_cast<long long>(shard) * ct) % ep != 0)
    refuse(fmt::format("--from-torchtitan: --parallelism.expert_parallel_degree {} must be a multiple of CP x TP = {} x "
                       "{} and divide data_parallel_shard_degree x CP x TP = {} x {} x {} (its EP mesh borrows all of "
                       "CP and TP and part of the FSDP shards; torchtitan refuses it too)",
                       ep, c, t, shard, c, t));
  if (m.experts % ep != 0)
    refuse(fmt::format("--from-torchtitan: --parallelism.expert_parallel_degree {} does not divide the model's {} "
                       "experts", ep, m.experts));
}

FrameworkPlan from_torchtitan_words(const std::vector<std::string>& all, const FrameworkInputs& in) {
  const Flags f = read_words(all, "torchtitan", torchtitan_flags(), torchtitan_ignored(), torchtitan_ignored_sections(),
                             underscores, kTorchtitanDoc);
  FrameworkPlan plan;
  const std::string fw = "torchtitan";
  if (in.model) refuse("--from-torchtitan: the model comes from --model.name and --model.flavor: leave gen --model out");
  // The model: torchtitan's flavors that are trainsim's presets (torchtitan_flavors: the same shapes field for field).
  const std::string name = text(f, "model.name", "llama3"), flavor = text(f, "model.flavor", "debugmodel");
  const std::string preset = torchtitan_preset(name, flavor);
  if (preset.empty()) {
    if (torchtitan_flavor_words(name).empty())
      refuse(tt("model.name") + " '" + name + "': trainsim has torchtitan's " + torchtitan_flavor_words());
    refuse(tt("model.flavor") + " '" + flavor + "': trainsim has " + torchtitan_flavor_words(name) + " (give one)");
  }
  // torchao's float8 training (dynamic per-tensor scaling, the LM head filtered out by torchtitan's default
  // filter_fqns) is trainsim's FP8 model; MX formats are not.
  const std::string converters = text(f, "model.converters", "");
  if (converters == "float8") {
    plan.fp8 = true;
    plan.fp8_all_gather = flag(f, "float8.enable_fsdp_float8_all_gather");
  } else if (!converters.empty()) {
    refuse(tt("model.converters") + " '" + converters + "': only float8 is modelled (MX formats are not)");
  }
  if (text(f, "optimizer.name", "AdamW") != "AdamW") refuse(tt("optimizer.name") + ": trainsim models AdamW");
  if (text(f, "training.mixed_precision_param", "bfloat16") != "bfloat16")
    refuse(tt("training.mixed_precision_param") + ": trainsim models bfloat16 parameters in compute");
  if (text(f, "training.mixed_precision_reduce", "float32") != "float32")
    refuse(tt("training.mixed_precision_reduce") + ": torchtitan reduces in float32");
  if (flag(f, "training.enable_cpu_offload")) refuse(tt("training.enable_cpu_offload") + ": CPU offload is not modelled");
  if (flag(f, "parallelism.disable_loss_parallel") && integer(f, fw, "parallelism.tensor_parallel_degree", 1) > 1)
    refuse(tt("parallelism.disable_loss_parallel") + ": trainsim's TP computes the loss vocabulary-parallel");
  const int c = static_cast<int>(integer(f, fw, "parallelism.context_parallel_degree", 1));
  hw::ModelSpec m = hw::model_preset(preset);
  const int ep = static_cast<int>(integer(f, fw, "parallelism.expert_parallel_degree", 1));
  m.grad_bytes = 4;  // mixed_precision_reduce float32
  plan.notes.push_back("weight grads in fp32 (torchtitan's mixed_precision_reduce float32)");

  const int t = static_cast<int>(integer(f, fw, "parallelism.tensor_parallel_degree", 1));
  const int p = static_cast<int>(integer(f, fw, "parallelism.pipeline_parallel_degree", 1));
  const int replicate = static_cast<int>(integer(f, fw, "parallelism.data_parallel_replicate_degree", 1));
  long long shard = integer(f, fw, "parallelism.data_parallel_shard_degree", -1, -1);
  if (shard == 0) refuse(tt("parallelism.data_parallel_shard_degree") + " is -1 or at least 1");
  if (shard == -1) {  // the rest of the world: gen --dp (the data-parallel degree) over the replicas
    if (in.dp % replicate != 0)
      refuse(fmt::format("--from-torchtitan: gen --dp {} is not a multiple of --parallelism.data_parallel_replicate_degree "
                         "{}",
                         in.dp, replicate));
    shard = in.dp / replicate;
    if (!in.dp_given && replicate == 1) note_dp(in, "torchtitan (data_parallel_shard_degree -1)", plan);
  }
  if (replicate > 1 && shard > 1)
    refuse("--from-torchtitan: --parallelism.data_parallel_replicate_degree and data_parallel_shard_degree both above 1 "
           "(HSDP) is not generated");
  const int d = replicate * static_cast<int>(shard);
  read_torchtitan_experts(f, m, ep, t, c, static_cast<int>(shard), plan);
  const int expert_parallel = m.moe() ? ep : 1;
  const long long local = integer(f, fw, "training.local_batch_size", integer(f, fw, "training.batch_size", 8));
  const long long global = integer(f, fw, "training.global_batch_size", -1, -1);
  long long accumulation = 1;
  if (global > 0) {
    if (global % (local * d) != 0)
      refuse(fmt::format("--from-torchtitan: --training.global_batch_size {} is not a multiple of local_batch_size {} x "
                         "the data-parallel degree {} (torchtitan refuses it too)",
                         global, local, d));
    accumulation = global / (local * d);
  } else if (global == 0) {
    refuse(tt("training.global_batch_size") + " is -1 or at least 1");
  }
  plan.seq = static_cast<int>(integer(f, fw, "training.seq_len", 2048));

  // Activation checkpointing (torchtitan's ActivationCheckpoint; default selective with option "2").
  const std::string mode = text(f, "activation_checkpoint.mode", "selective");
  const std::string option = text(f, "activation_checkpoint.selective_ac_option", "2");
  if (mode == "none") {
    plan.recompute = hw::Recompute::None;
  } else if (mode == "full") {
    plan.recompute = hw::Recompute::Full;
  } else if (mode == "selective" && option == "op") {
    plan.recompute = hw::Recompute::Selective;
    plan.notes.push_back("selective activation checkpointing 'op' as trainsim's selective recomputation (the attention "
                         "core recomputed, no attention scores kept): the nearest mode trainsim has");
  } else if (mode == "selective" && option == "1") {
    plan.recompute = hw::Recompute::Full;
  } else if (mode == "selective") {
    refuse(fmt::format("--from-torchtitan: --activation_checkpoint.mode selective with selective_ac_option '{}' "
                       "(torchtitan's default: every {}th block checkpointed) is not expressible: trainsim recomputes "
                       "every block or none; give --activation_checkpoint.mode none or full, or selective with "
                       "--activation_checkpoint.selective_ac_option op",
                       option, option));
  } else {
    refuse(tt("activation_checkpoint.mode") + " '" + mode + "' is not modelled (none, full, selective)");
  }

  GenOptions& o = plan.options;
  if (p > 1) {
    const std::string sname = text(f, "parallelism.pipeline_parallel_schedule", "1F1B");
    const TtSchedule* sched = tt_schedule(sname);
    if (!sched)
      refuse(tt("parallelism.pipeline_parallel_schedule") + " '" + sname +
             "' is not generated (1F1B, GPipe, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, "
             "DualPipeV)");
    const int in_w = static_cast<int>(integer(f, fw, "parallelism.pipeline_parallel_first_stage_less_layers", 1, 0));
    const int out_w = static_cast<int>(integer(f, fw, "parallelism.pipeline_parallel_last_stage_less_layers", 1, 0));
    int per_rank = sched->single ? 1 : 2;
    if (f.has("parallelism.pipeline_parallel_layers_per_stage")) {
      const long long lps = integer(f, fw, "parallelism.pipeline_parallel_layers_per_stage", 1);
      const long long stages = (m.blocks + in_w + out_w + lps - 1) / lps;
      if (stages % p != 0)
        refuse(fmt::format("--from-torchtitan: {} virtual stages (--parallelism.pipeline_parallel_layers_per_stage {}) "
                           "are not a multiple of --parallelism.pipeline_parallel_degree {} (torchtitan refuses it too)",
                           stages, lps, p));
      per_rank = static_cast<int>(stages / p);
      if (sched->single && per_rank != 1)
        refuse(fmt::format("--from-torchtitan: {} runs one stage per rank, but the layers per stage give {}", sname, per_rank));
      if (!sched->single && per_rank < 2)
        refuse(fmt::format("--from-torchtitan: {} needs at least 2 stages per rank, the layers per stage give {}", sname,
                           per_rank));
    }
    const bool v_shaped = v_shaped_schedule(sched->kind);
    if (v_shaped && per_rank != 2)
      refuse(fmt::format("--from-torchtitan: {} runs 2 stages per rank (V placement), not {}", sname, per_rank));
    if (accumulation > 1)
      refuse("--from-torchtitan: gradient accumulation (global_batch_size above local_batch_size x the data-parallel "
             "degree) with pipelining: torchtitan flushes the pipeline between the accumulation steps, which one "
             "generated step does not hold");
    const long long pmb = integer(f, fw, "parallelism.pipeline_parallel_microbatch_size", 1);
    if (local % pmb != 0)
      refuse(fmt::format("--from-torchtitan: --training.local_batch_size {} is not a multiple of "
                         "--parallelism.pipeline_parallel_microbatch_size {}",
                         local, pmb));
    plan.microbatch_size = static_cast<int>(pmb);
    o.microbatches = static_cast<int>(local / pmb);
    const std::vector<int> split = torchtitan_split(p * per_rank, m.blocks, in_w, out_w);
    const std::string kind = sched->kind;
    if (kind == "gpipe" || kind == "looped-bfs") {  // pipelines gen 3d does not run
      if (t > 1 || d > 1 || expert_parallel > 1)
        refuse(fmt::format("--from-torchtitan: {} with tensor, data or expert parallelism is not generated (gen 3d runs 1F1B, "
                           "Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble and DualPipeV)",
                           sname));
      plan.kind = kind;
      o.stages = p, o.chunks = per_rank;
      o.layout = layout_text(split);
    } else {  // one schedule layer per block, as gen 3d makes them
      plan.kind = "3d";
      o.tp = t, o.pp = p, o.dp = d, o.cp = c, o.ep = expert_parallel, o.schedule = kind;
      o.chunks = v_shaped_schedule(kind) ? 1 : per_rank;
      o.chunk_blocks = split;
      o.zero = shard > 1 || c > 1 ? 3 : 0;  // torchtitan shards over data parallelism x CP
      o.sequence_parallel = t > 1;
    }
  } else {
    plan.microbatch_size = static_cast<int>(local);
    o.microbatches = static_cast<int>(accumulation);
    o.layers = m.blocks;  // torchtitan wraps each block in its own FSDP unit
    if (t == 1 && c == 1 && shard > 1 && !m.moe()) {
      plan.kind = "fsdp";
      o.dp = static_cast<int>(shard);
      const std::string reshard = text(f, "parallelism.fsdp_reshard_after_forward", "default");
      if (reshard != "default" && reshard != "always" && reshard != "never")
        refuse(tt("parallelism.fsdp_reshard_after_forward") + " is default, always or never, not '" + reshard + "'");
      o.reshard_after_forward = reshard != "never";
    } else if (t == 1 && c == 1 && replicate > 1 && !m.moe()) {
      plan.kind = "ddp";
      o.dp = replicate;
    } else {
      plan.kind = "3d";  // (an MoE model too: gen 3d --ep, expert parallelism or not)
      o.tp = t, o.pp = 1, o.dp = d, o.cp = c, o.ep = expert_parallel;
      o.layers = 0;
      o.chunk_blocks = {m.blocks};
      o.zero = shard > 1 || c > 1 ? 3 : 0;  // torchtitan shards over data parallelism x CP
      o.sequence_parallel = t > 1;  // torchtitan's TP plan runs the norms sequence-parallel
    }
  }
  // torchtitan's TP collectives are DTensor's, waited for before the next op, unless async TP (which needs
  // torch.compile) runs them under the matrix multiplies.
  plan.tp_overlap = flag(f, "parallelism.enable_async_tensor_parallel") ? hw::TpOverlap::Full : hw::TpOverlap::None;
  // Without torch.compile every elementwise operation of the model's code is a kernel of its own.
  const bool compiled = flag(f, "compile.enable") || flag(f, "training.compile");
  plan.elementwise = compiled ? hw::Elementwise::Fused : hw::Elementwise::Eager;
  if (flag(f, "parallelism.enable_async_tensor_parallel") && !compiled)
    refuse(tt("parallelism.enable_async_tensor_parallel") + " needs --compile.enable (torchtitan refuses it without)");
  plan.model = m;
  note_ignored(f, plan);
  return plan;
}

}  // namespace

}  // namespace trainsim
