// `trainsim sample`, `trainsim score` and `trainsim export`: use a trained model (exec/whole_model.h): generate
// text from a checkpoint with a KV cache (exec/sampling.h), score a text with it (exec/scoring.h), or write it in
// the Hugging Face Llama format (exec/hf_export.h).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "apps/commands.h"
#include "apps/json_text.h"
#include "apps/number_check.h"
#include "apps/output_names.h"
#include "apps/text_file.h"
#include "exec/file_io.h"
#include "exec/hf_export.h"
#include "exec/layout.h"
#include "exec/sampling.h"
#include "exec/scoring.h"
#include "exec/whole_model.h"

namespace trainsim::apps {

namespace {

struct SampleArgs {
  std::string checkpoint;
  exec::SampleOptions o;
};

int run_sample(const SampleArgs& a) {
  constexpr const char* kCmd = "trainsim sample";
  try {
    const exec::SavedModel saved = exec::read_saved_model(a.checkpoint);
    const std::vector<float> flat = exec::flatten_parameters(saved.model, saved.weights);
    const std::string text = exec::generate_text(saved.model, flat, a.o);
    std::cout << a.o.prompt << text << "\n";
    return 0;
  } catch (const std::exception& e) {  // (a checkpoint that cannot be read: CheckpointError)
    fmt::print(stderr, "{}: {}\n", kCmd, e.what());
    return 2;
  }
}

struct ScoreArgs {
  std::string checkpoint, text, logits;
  bool json = false;
};

// The most text scored (16 MiB: the small model takes about a minute per MiB on one core) and the most bytes whose
// logits --logits writes (100,000: 256 numbers each, about 0.3 GB of JSON).
constexpr std::size_t kMaxScoredBytes = std::size_t{16} << 20;
constexpr long long kMaxLogitBytes = 100'000;

int run_score(const ScoreArgs& a) {
  constexpr const char* kCmd = "trainsim score";
  try {
    std::string text;
    exec::append_regular_file(a.text, kMaxScoredBytes, text, "the text");
    const exec::SavedModel saved = exec::read_saved_model(a.checkpoint);
    const std::vector<float> flat = exec::flatten_parameters(saved.model, saved.weights);
    if (!a.logits.empty() && static_cast<long long>(text.size()) - 1 > kMaxLogitBytes) {
      fmt::print(stderr, "{}: --logits writes at most {} bytes' logits; the text has {} bytes to predict\n", kCmd,
                 kMaxLogitBytes, text.size() - 1);
      return 2;
    }
    const exec::TextScore s = exec::score_text(saved.model, flat, text, !a.logits.empty(), !a.logits.empty());
    if (!a.logits.empty()) {
      nlohmann::ordered_json j;
      j["text"] = a.text;
      j["checkpoint"] = a.checkpoint;
      nlohmann::json tokens = nlohmann::json::array();
      for (const exec::TokenScore& t : s.tokens)
        tokens.push_back({{"position", t.position}, {"token", t.token}, {"log_prob", t.log_prob}, {"logits", t.logits}});
      j["tokens"] = std::move(tokens);
      if (!write_output(kCmd, a.logits, j.dump() + "\n")) return 2;
    }
    if (a.json) {
      nlohmann::ordered_json j;
      j["text"] = a.text;
      j["checkpoint"] = a.checkpoint;
      j["step"] = saved.info.step;
      j["model"] = saved.model.describe();
      j["bytes"] = text.size();
      j["predicted"] = s.predicted;
      j["loss"] = s.loss;
      j["perplexity"] = s.perplexity;
      j["bits_per_byte"] = s.bits_per_byte;
      std::cout << json_text(j) << "\n";
    } else {
      fmt::print("{}: {} bytes predicted: loss {:.4f} nats per byte, perplexity {:.3f}, {:.3f} bits per byte "
                 "(checkpoint {}, step {} of {}; model {})\n",
                 a.text, s.predicted, s.loss, s.perplexity, s.bits_per_byte, a.checkpoint, saved.info.step,
                 saved.info.total_steps, saved.model.describe());
    }
    return 0;
  } catch (const std::exception& e) {  // (a text or checkpoint that cannot be read: FileError, CheckpointError)
    fmt::print(stderr, "{}: {}\n", kCmd, e.what());
    return 2;
  }
}

struct ExportArgs {
  std::string checkpoint, preset, output;
  std::uint64_t seed = 1;
  bool optimizer = false;
};

int run_export(const ExportArgs& a) {
  constexpr const char* kCmd = "trainsim export";
  if (a.checkpoint.empty() == a.preset.empty()) {
    fmt::print(stderr, "{}: give --checkpoint DIR (a trained model) or --model PRESET (a freshly initialised one)\n", kCmd);
    return 2;
  }
  if (a.optimizer && a.checkpoint.empty()) {
    fmt::print(stderr, "{}: --optimizer needs --checkpoint (a fresh model has no optimizer state)\n", kCmd);
    return 2;
  }
  try {
    if (!a.checkpoint.empty()) {
      const exec::SavedModel saved = exec::read_saved_model(a.checkpoint, a.optimizer);
      exec::export_hf_llama(a.output, saved.model, saved.weights, a.optimizer ? &saved.moments : nullptr);
      fmt::print("wrote {}/model.safetensors{}, config.json and the tokenizer's files: {}, step {} of {}\n", a.output,
                 a.optimizer ? ", optimizer.safetensors" : "", saved.model.describe(),
                 saved.info.step, saved.info.total_steps);
      return 0;
    }
    const exec::ModelConfig model = exec::preset(a.preset);
    const exec::LayerLayout layout = exec::whole_model_layout(model);
    std::vector<float> flat(static_cast<std::size_t>(layout.size()));
    exec::init_parameters(layout, a.seed, 0, layout.size(), flat.data());
    exec::NamedParameters params;
    for (const exec::ParamSpec& p : layout.params())
      params[p.name].assign(flat.begin() + p.offset, flat.begin() + p.offset + p.size());
    exec::export_hf_llama(a.output, model, params);
    fmt::print("wrote {}/model.safetensors, config.json and the tokenizer's files: {} initialised from seed {}\n", a.output, model.describe(),
               a.seed);
    return 0;
  } catch (const std::exception& e) {  // (a checkpoint that cannot be read, an output that cannot be written)
    fmt::print(stderr, "{}: {}\n", kCmd, e.what());
    return 2;
  }
}

}  // namespace

void add_model_commands(CLI::App& app, int* exit_code) {
  auto s = std::make_shared<SampleArgs>();
  CLI::App* sample = app.add_subcommand(
      "sample",
      "Generate text from a trained checkpoint (trainsim replay --save DIR, any rank layout: the shards and slices "
      "are put together), one byte at a time with a KV cache. Prints the prompt and what follows it. Exit status: 0 "
      "generated; 2 a bad option or a checkpoint that cannot be read.");
  sample->add_option("--checkpoint", s->checkpoint, "The checkpoint directory (trainsim replay --save DIR)")->required();
  sample->add_option("--prompt", s->o.prompt, "Text to continue (default: start after a newline)");
  sample->add_option("--tokens", s->o.tokens, "Bytes to generate (1 to 1000000)")
      ->check(integer_in(1, 1'000'000, "", "N"))
      ->capture_default_str();
  sample->add_option("--temperature", s->o.temperature,
                     "Divide the logits by this before drawing (0: always the most likely byte; up to 100)")
      ->check(number_in(0, 100, "", "T"))
      ->capture_default_str();
  sample->add_option("--top-k", s->o.top_k, "Draw among the K most likely bytes only (0: all; up to 256)")
      ->check(integer_in(0, 256, "", "K"))
      ->capture_default_str();
  sample->add_option("--seed", s->o.seed, "Random seed of the draws, 0 to 2^64-1")
      ->check(integer_in(0, std::numeric_limits<std::uint64_t>::max(), "", "SEED"))
      ->capture_default_str();
  sample->callback([s, exit_code] { *exit_code = run_sample(*s); });

  auto sc = std::make_shared<ScoreArgs>();
  CLI::App* score = app.add_subcommand(
      "score",
      "Score a text with a trained checkpoint: the loss of every byte given the bytes before it in windows of the "
      "model's seq bytes (as training cuts its sequences), as nats per byte, perplexity and bits per byte, to "
      "compare checkpoints or implementations. Exit status: 0 scored; 2 a bad option, or a text or checkpoint that "
      "cannot be read.");
  score->add_option("--checkpoint", sc->checkpoint, "The checkpoint directory (trainsim replay --save DIR)")->required();
  score->add_option("--text", sc->text, "The text file to score (2 bytes to 16 MiB)")->required();
  score->add_option("--logits", sc->logits,
                    "Also write each predicted byte's position, byte, log-probability and 256 logits here "
                    "(NAME.json; at most 100,000 bytes)")
      ->check(output_named({".json"}, "JSON", "NAME.json"));
  score->add_flag("--json", sc->json, "Print the figures as a JSON object");
  score->callback([sc, exit_code] { *exit_code = run_score(*sc); });

  auto e = std::make_shared<ExportArgs>();
  CLI::App* exp = app.add_subcommand(
      "export",
      "Write a trained checkpoint (or a freshly initialised model, --model) as Hugging Face Llama weights: "
      "DIR/model.safetensors (LlamaForCausalLM's names; q and k rows permuted for rotate_half's rotary pairs) and "
      "DIR/config.json, with the byte-level tokenizer (tokenizer.json, tokenizer_config.json, generation_config.json), "
      "so that it loads in PyTorch and transformers (examples/hf_llama_torch.py loads it without transformers). Exit status: 0 written; 2 a bad option, a checkpoint that "
      "cannot be read or an output that cannot be written.");
  exp->add_option("--checkpoint", e->checkpoint, "The checkpoint directory (trainsim replay --save DIR)");
  exp->add_option("--model", e->preset, "Instead of a checkpoint: the preset (tiny, small, tiny-moe, small-moe) initialised from --seed");
  exp->add_option("--seed", e->seed, "With --model: the initialisation seed (trainsim replay's --seed)")
      ->check(integer_in(0, std::numeric_limits<std::uint64_t>::max(), "", "SEED"))
      ->capture_default_str();
  exp->add_flag("--optimizer", e->optimizer,
                "Also write DIR/optimizer.safetensors: AdamW's moments as exp_avg.NAME and exp_avg_sq.NAME");
  exp->add_option("-o,--output", e->output, "The directory to write (created if needed)")->required();
  exp->callback([e, exit_code] { *exit_code = run_export(*e); });
}

}  // namespace trainsim::apps
