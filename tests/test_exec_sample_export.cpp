// Issue 21, using the trained model: `trainsim sample` generates with a KV cache whose logits are the batched
// forward's, from a checkpoint of any rank layout; `trainsim export` writes Hugging Face Llama safetensors (q and
// k rows permuted for rotate_half) and config.json. The numerics against PyTorch are tests/torch/.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "exec/cpu/cpu_kernels.h"
#include "exec/hf_export.h"
#include "exec/hf_tokenizer.h"
#include "exec/model.h"
#include "exec/sampling.h"
#include "exec/whole_model.h"
#include "exec_helpers.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

std::vector<float> fresh_model(const exec::ModelConfig& m, std::uint64_t seed) {
  const exec::LayerLayout layout = exec::whole_model_layout(m);
  std::vector<float> flat(static_cast<std::size_t>(layout.size()));
  exec::init_parameters(layout, seed, 0, layout.size(), flat.data());
  return flat;
}

}  // namespace

TEST_CASE("sample: the KV cache gives the batched forward's logits, token by token") {
  exec::ModelConfig m = exec::preset("tiny");
  m.blocks = 3;
  SUBCASE("dense") {}
  SUBCASE("Mixture of Experts, block 0 dense") { m.experts = 4, m.top_k = 2, m.dense_blocks = 1; }
  const std::vector<float> flat = fresh_model(m, 11);
  std::vector<int> tokens(m.seq);
  for (int t = 0; t < m.seq; ++t) tokens[t] = (t * 37 + 5) % m.vocab;
  // The training forward of one sequence (exec/model.cpp), all positions at once.
  exec::HostAllocator alloc;
  exec::CpuKernels<float> k;
  std::vector<float> cos, sin;
  exec::rope_tables(m, cos, sin);
  exec::ModelContext<float> c{.k = &k, .alloc = &alloc, .rope_cos = cos.data(), .rope_sin = sin.data()};
  std::vector<float> logits(static_cast<std::size_t>(m.seq) * m.vocab);
  exec::layer_forward(c, exec::whole_model_layout(m), flat.data(), tokens.data(), 1, logits.data(),
                      static_cast<exec::LayerStash*>(nullptr));
  exec::Generator g(m, flat);
  double worst = 0;
  for (int t = 0; t < m.seq; ++t) {
    const std::vector<float>& one = g.feed(tokens[t]);
    for (int v = 0; v < m.vocab; ++v)
      worst = std::max(worst, static_cast<double>(std::abs(one[v] - logits[static_cast<std::size_t>(t) * m.vocab + v])));
  }
  CHECK(worst <= 1e-5);  // fp32, sums in another order
  CHECK(g.position() == m.seq);
  CHECK_THROWS_AS(g.feed(1), std::logic_error);  // full: reset first
  CHECK_THROWS_AS(exec::Generator(m, std::vector<float>(10)), std::invalid_argument);
}

TEST_CASE("sample: token choice (greedy, top-k, temperature) and determinism") {
  std::vector<float> logits(8, 0.0f);
  logits[5] = 3.0f, logits[2] = 2.5f;
  CHECK(exec::pick_token(logits, 0.0, 0, 1, 0) == 5);
  for (std::uint64_t i = 0; i < 50; ++i) CHECK(exec::pick_token(logits, 1.0, 1, 9, i) == 5);  // top 1: greedy
  for (std::uint64_t i = 0; i < 50; ++i) {
    const int t = exec::pick_token(logits, 1.0, 2, 9, i);
    CHECK((t == 5 || t == 2));
  }
  exec::ModelConfig m = exec::preset("tiny");
  const std::vector<float> flat = fresh_model(m, 3);
  exec::SampleOptions o;
  o.prompt = "Hello";
  o.tokens = 40;  // more than seq (16): the cache is rebuilt on the way
  const std::string a = exec::generate_text(m, flat, o), b = exec::generate_text(m, flat, o);
  CHECK(a.size() == 40);
  CHECK(a == b);
  o.seed = 2;
  CHECK(exec::generate_text(m, flat, o) != a);
  o.temperature = -1;
  CHECK_THROWS_AS(exec::generate_text(m, flat, o), std::invalid_argument);
}

TEST_CASE("sample and export: a checkpoint of any rank layout, gathered") {
  auto dir = fresh_dir("sample-export");
  const std::string data = " --data " + test_corpus();
  const std::string sched = (dir / "3d.sched").string(), ck = (dir / "ck").string();
  REQUIRE(run_trainsim("gen 3d --tp 2 --pp 2 --dp 2 --zero 3 --microbatches 2 -o " + sched).exit_code == 0);
  REQUIRE(run_trainsim("replay " + sched + " --model tiny --steps 2 --save " + ck + data).exit_code == 0);
  // The manifest records the layer split: the weights can be put together without the schedule.
  const exec::CheckpointInfo info = exec::read_checkpoint_info(ck);
  CHECK(info.layers == 2);
  CHECK(info.stage_layout.empty());
  const exec::SavedModel saved = exec::read_saved_model(ck, true);
  CHECK(saved.weights.size() == exec::whole_model_layout(saved.model).params().size());
  CHECK(saved.moments.first.size() == saved.weights.size());

  CommandResult r = run_trainsim("sample --checkpoint " + ck + " --prompt 'The ' --tokens 30 --seed 4");
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.rfind("The ", 0) == 0);
  CHECK(r.out.size() == 4 + 30 + 1);
  CHECK(run_trainsim("sample --checkpoint " + ck + " --prompt 'The ' --tokens 30 --seed 4").out == r.out);
  CHECK(run_trainsim("sample --checkpoint " + (dir / "none").string()).exit_code == 2);

  const std::string out = (dir / "hf").string();
  REQUIRE(run_trainsim("export --checkpoint " + ck + " -o " + out + " --optimizer").exit_code == 0);
  const nlohmann::json config = nlohmann::json::parse(slurp(dir / "hf" / "config.json"));
  CHECK(config["architectures"][0] == "LlamaForCausalLM");
  CHECK(config["hidden_size"] == 32);
  CHECK(config["num_hidden_layers"] == 2);
  CHECK(config["tie_word_embeddings"] == false);
  // The safetensors header: names, shapes, offsets back to back.
  const std::string st = slurp(dir / "hf" / "model.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, st.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(st.substr(8, n));
  CHECK((8 + n) % 8 == 0);
  CHECK(header["model.layers.1.self_attn.q_proj.weight"]["shape"] == nlohmann::json::array({32, 32}));
  CHECK(header["model.layers.0.mlp.down_proj.weight"]["shape"] == nlohmann::json::array({32, 64}));
  CHECK(header["lm_head.weight"]["dtype"] == "F32");
  std::uint64_t end = 0;
  for (const auto& [name, t] : header.items())
    if (name != "__metadata__") end = std::max(end, t["data_offsets"][1].get<std::uint64_t>());
  CHECK(st.size() == 8 + n + end);
  // q_proj row j of a head is trainsim's row 2j, row hd/2 + j its row 2j + 1 (rotate_half's pairs); v_proj as is.
  auto row = [&](const std::string& name, long r, long cols) {
    const auto off = header[name]["data_offsets"][0].get<std::size_t>();
    std::vector<float> v(cols);
    std::memcpy(v.data(), st.data() + 8 + n + off + r * cols * 4, cols * 4);
    return v;
  };
  const std::vector<float>& wqkv = saved.weights.at("blocks.0.wqkv");
  const int hd = 16, d = 32;
  auto trainsim_row = [&](long r) { return std::vector<float>(wqkv.begin() + r * d, wqkv.begin() + (r + 1) * d); };
  CHECK(row("model.layers.0.self_attn.q_proj.weight", 1, d) == trainsim_row(2));
  CHECK(row("model.layers.0.self_attn.q_proj.weight", hd / 2 + 1, d) == trainsim_row(3));
  CHECK(row("model.layers.0.self_attn.k_proj.weight", hd + 3, d) == trainsim_row(d + hd + 6));
  CHECK(row("model.layers.0.self_attn.v_proj.weight", 5, d) == trainsim_row(2 * d + 5));
  CHECK(std::filesystem::exists(dir / "hf" / "optimizer.safetensors"));
  // The tokenizer's files, written beside the weights.
  const nlohmann::json tok = nlohmann::json::parse(slurp(dir / "hf" / "tokenizer.json"));
  CHECK(tok["model"]["type"] == "BPE");
  CHECK(tok["model"]["vocab"].size() == 256);
  CHECK(tok["pre_tokenizer"]["type"] == "ByteLevel");
  CHECK(tok["pre_tokenizer"]["use_regex"] == false);
  CHECK(tok["model"]["vocab"]["a"] == 'a');
  CHECK(tok["model"]["vocab"]["\u0120"] == ' ');  // (GPT-2's symbol of the space, "Ġ")
  CHECK(nlohmann::json::parse(slurp(dir / "hf" / "tokenizer_config.json"))["model_max_length"] == 16);
  CHECK(nlohmann::json::parse(slurp(dir / "hf" / "generation_config.json"))["do_sample"] == true);

  // A fresh model from a seed, as replay --seed initialises it.
  REQUIRE(run_trainsim("export --model tiny --seed 7 -o " + (dir / "init").string()).exit_code == 0);
  CHECK(run_trainsim("export -o " + (dir / "x").string()).exit_code == 2);
  CHECK(run_trainsim("export --model tiny --optimizer -o " + (dir / "x").string()).exit_code == 2);
}

TEST_CASE("export: the byte-level tokenizer is GPT-2's byte alphabet, one id per byte") {
  // bytes_to_unicode of GPT-2's encoder.py, written out: the printable bytes are themselves, the others
  // U+0100 onwards in increasing order of the byte.
  auto u = [](unsigned c) { return c < 0x80 ? std::string(1, char(c)) : std::string{char(0xc0 | (c >> 6)), char(0x80 | (c & 0x3f))}; };
  CHECK(exec::byte_level_symbol('A') == "A");
  CHECK(exec::byte_level_symbol(0) == u(0x100));
  CHECK(exec::byte_level_symbol(' ') == u(0x120));   // Ġ
  CHECK(exec::byte_level_symbol('\n') == u(0x10a));  // Ċ
  CHECK(exec::byte_level_symbol(0x7f) == u(0x121));
  CHECK(exec::byte_level_symbol(0xad) == u(0x143));  // the soft hyphen, the last byte not written as itself
  CHECK(exec::byte_level_symbol(0xe9) == u(0xe9));   // é
  // A bijection of the 256 bytes; a model of a smaller vocabulary gets only its ids.
  exec::ModelConfig m;
  const nlohmann::json vocab = nlohmann::json::parse(exec::hf_byte_tokenizer_json(m))["model"]["vocab"];
  std::vector<int> seen(256, 0);
  for (const auto& [symbol, id] : vocab.items()) {
    REQUIRE(id.get<int>() >= 0);
    REQUIRE(id.get<int>() < 256);
    ++seen[id.get<int>()];
    CHECK(exec::byte_level_symbol(id.get<int>()) == symbol);
  }
  CHECK(std::count(seen.begin(), seen.end(), 1) == 256);
  m.vocab = 100;
  CHECK(nlohmann::json::parse(exec::hf_byte_tokenizer_json(m))["model"]["vocab"].size() == 100);
}
