// `trainsim score` (issue 38: a checkpoint's quality could not be measured): the loss of a text under a
// checkpoint, its perplexity and bits per byte, and each byte's logits. References: a model whose logits are
// (almost) equal everywhere scores ln 256 nats per byte; each logged log-probability is recomputed here from its
// own logits (log-softmax in long double); training on a text lowers its loss.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "exec/layout.h"
#include "exec/scoring.h"
#include "exec/whole_model.h"

using namespace trainsim;
using namespace trainsim::testing;

TEST_CASE("score: an initialised model is near ln 256, the figures are one loss in three units") {
  const exec::ModelConfig model = exec::preset("tiny");
  const exec::LayerLayout layout = exec::whole_model_layout(model);
  std::vector<float> flat(static_cast<std::size_t>(layout.size()));
  exec::init_parameters(layout, 1, 0, layout.size(), flat.data());
  const std::string text = "The quick brown fox jumps over the lazy dog, again and again and again.";
  const exec::TextScore s = exec::score_text(model, flat, text, true);
  CHECK(s.predicted == static_cast<long long>(text.size()) - 1);
  CHECK(s.loss == doctest::Approx(std::log(256.0)).epsilon(0.01));  // small initial weights: near-uniform logits
  CHECK(s.perplexity == doctest::Approx(std::exp(s.loss)));
  CHECK(s.bits_per_byte == doctest::Approx(s.loss / std::log(2.0)));
  REQUIRE(s.tokens.size() == text.size() - 1);
  double sum = 0;
  for (std::size_t i = 0; i < s.tokens.size(); ++i) {
    CHECK(s.tokens[i].position == static_cast<int>(i + 1));
    CHECK(s.tokens[i].token == static_cast<unsigned char>(text[i + 1]));
    sum -= s.tokens[i].log_prob;
  }
  CHECK(sum / static_cast<double>(s.tokens.size()) == doctest::Approx(s.loss).epsilon(1e-12));
  // The same text and model give the same bits.
  CHECK(exec::score_text(model, flat, text).loss == s.loss);
  CHECK_THROWS_AS(exec::score_text(model, flat, "x"), std::invalid_argument);
}

TEST_CASE("trainsim score: a trained checkpoint scores its corpus lower than the start, --logits agree with log_prob") {
  const auto dir = fresh_dir("score");
  const std::string ck = (dir / "ck").string(), start = (dir / "start").string(), logits = (dir / "l.json").string();
  const std::string corpus = std::string(TRAINSIM_SOURCE_DIR) + "/tests/data/corpus.txt";
  REQUIRE(run_trainsim("replay ddp --model tiny --steps 1 --stop-after 1 --lr 1e-9 --save " + start + " --data " + corpus)
              .exit_code == 0);
  REQUIRE(run_trainsim("replay ddp --model tiny --steps 40 --lr 1e-2 --save " + ck + " --data " + corpus).exit_code == 0);
  auto loss_of = [&](const std::string& checkpoint) {
    const CommandResult r = run_trainsim("score --checkpoint " + checkpoint + " --text " + corpus + " --json");
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.out)["loss"].get<double>();
  };
  const double before = loss_of(start), after = loss_of(ck);
  MESSAGE("loss on the corpus: " << before << " nats per byte at the start, " << after << " after 40 steps");
  CHECK(after < before - 0.3);

  // The logits file: each log-probability is the log-softmax of its own logits at its byte.
  const std::string text_path = (dir / "t.txt").string();
  std::ofstream(text_path) << "hello, world\n";
  CommandResult r = run_trainsim("score --checkpoint " + ck + " --text " + text_path + " --logits " + logits, true);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("12 bytes predicted: loss ") != std::string::npos);
  std::ifstream in(logits);
  const nlohmann::json j = nlohmann::json::parse(in);
  REQUIRE(j["tokens"].size() == 12);
  for (const auto& t : j["tokens"]) {
    long double top = -1e300L, z = 0;
    for (const auto& l : t["logits"]) top = std::max(top, static_cast<long double>(l.get<double>()));
    for (const auto& l : t["logits"]) z += std::exp(static_cast<long double>(l.get<double>()) - top);
    const long double want = static_cast<long double>(t["logits"][t["token"].get<int>()].get<double>()) - top - std::log(z);
    CHECK(t["log_prob"].get<double>() == doctest::Approx(static_cast<double>(want)).epsilon(1e-9));
  }
  // A text or checkpoint that cannot be read: exit 2, named.
  r = run_trainsim("score --checkpoint " + ck + " --text /nonexistent.txt", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("/nonexistent.txt") != std::string::npos);
  r = run_trainsim("score --checkpoint /nonexistent --text " + text_path, true);
  CHECK(r.exit_code == 2);
}
