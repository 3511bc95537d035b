// Issue 21, logs and validation: every step reports its learning rate, gradient norm before clipping, clip
// coefficient, time and peak memory per rank; --eval-every evaluates fixed validation sequences on the whole
// model; --log writes one row per step (CSV or JSON lines), and a diverged run says where.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "exec/data.h"
#include "exec/optimizer.h"
#include "exec/reference.h"
#include "exec/whole_model.h"
#include "exec_helpers.h"
#include "schedules/generators.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

Schedule gen(const std::string& kind, int stages, int microbatches, int dp = 1, int layers = 0) {
  GenOptions g;
  g.stages = stages, g.microbatches = microbatches, g.dp = dp, g.layers = layers;
  return generate(kind, g);
}

}  // namespace

TEST_CASE("training log: learning rate, gradient norm, clip coefficient and memory of every step") {
  const Schedule s = gen("1f1b", 2, 4);
  exec::ReplayOptions o = tiny_options(s, 5);
  std::vector<exec::StepReport> seen;
  exec::ReplayResult r = exec::replay(s, o, [&](const exec::StepReport& rep) { seen.push_back(rep); });
  REQUIRE(r.ok);
  REQUIRE(seen.size() == 5);
  REQUIRE(r.grad_norms.size() == 5);
  REQUIRE(r.step_peak_bytes.size() == 5);
  for (int i = 0; i < 5; ++i) {
    CAPTURE(i);
    // The learning rate is the optimizer's schedule (exact: the float, as its shortest decimal).
    CHECK(static_cast<float>(r.learning_rates[i]) == exec::learning_rate(o.optimizer, i, 5));
    CHECK(std::isfinite(r.grad_norms[i]));
    CHECK(r.grad_norms[i] > 0);
    // torch.nn.utils.clip_grad_norm_'s coefficient, as the AdamW kernels apply it.
    CHECK(r.clip_coefficients[i] ==
          doctest::Approx(std::min(1.0, o.optimizer.grad_clip / (r.grad_norms[i] + 1e-6))).epsilon(1e-6));
    CHECK(r.step_seconds[i] > 0);
    REQUIRE(r.step_peak_bytes[i].size() == 2);
    for (int rank = 0; rank < 2; ++rank) {
      CHECK(r.step_peak_bytes[i][rank] <= r.peak_bytes[rank]);
      CHECK(r.step_peak_bytes[i][rank] >= r.schedule_tensor_bytes[rank]);
    }
    CHECK(seen[i].grad_norm == r.grad_norms[i]);
    CHECK_FALSE(seen[i].evaluated);
  }
  CHECK(r.evaluations.empty());
}

TEST_CASE("training log: the gradient norm is the same however the schedule splits the gradient") {
  // Step 1 starts from the same weights on every layout: the norms of its gradient agree to fp32 rounding, and
  // a schedule that cannot clip (DDP's updates interleave with the reductions) still reports it.
  std::vector<double> norms;
  for (const Schedule& s : {gen("1f1b", 1, 4), gen("1f1b", 2, 4), gen("fsdp", 1, 2, 2, 2), gen("ddp", 1, 2, 2, 2),
                            gen("zb-h1", 2, 4)}) {
    exec::ReplayOptions o = tiny_options(s, 1);
    o.model.blocks = 2;
    exec::ReplayResult r = exec::replay(s, o);
    INFO(r.error);
    REQUIRE(r.ok);
    norms.push_back(r.grad_norms.at(0));
  }
  for (double n : norms) CHECK(n == doctest::Approx(norms[0]).epsilon(1e-6));
}

TEST_CASE("validation: fixed held-out sequences, the same loss on every rank layout") {
  // After one step every layout holds the same model to fp32 rounding: the validation losses agree.
  std::vector<double> losses;
  for (const Schedule& s : {gen("1f1b", 1, 4), gen("1f1b", 2, 4), gen("fsdp", 1, 2, 2, 2)}) {
    exec::ReplayOptions o = tiny_options(s, 3);
    o.model.blocks = 2;
    o.eval_every = 2;
    o.eval_sequences = 5;
    std::vector<int> evaluated;
    exec::ReplayResult r = exec::replay(s, o, [&](const exec::StepReport& rep) {
      if (rep.evaluated) evaluated.push_back(rep.step);
    });
    INFO(r.error);
    REQUIRE(r.ok);
    CHECK(evaluated == std::vector<int>{1, 2});  // after step 2 (every 2) and after the last
    REQUIRE(r.evaluations.size() == 2);
    CHECK(r.evaluations[0].step == 2);
    CHECK(r.evaluations[1].step == 3);
    losses.push_back(r.evaluations[1].loss);
  }
  for (double l : losses) CHECK(l == doctest::Approx(losses[0]).epsilon(1e-5));

  // The evaluation is the single-device model's mean loss over those sequences: against the reference trainer's
  // weights, computed here sequence by sequence.
  const Schedule s = gen("1f1b", 1, 4);
  exec::ReplayOptions o = tiny_options(s, 3);
  o.model.blocks = 2;
  exec::TokenData data({test_corpus()});
  exec::ReferenceTrainer ref(o.model, o.optimizer, 3, o.seed, data, 4, true);
  for (int step = 0; step < 3; ++step) ref.step(step);
  const std::vector<float> flat = exec::flatten_parameters(o.model, ref.parameters());
  // The same sequences in batches of one: the same mean (to fp32 rounding).
  exec::ModelConfig one = o.model;
  one.microbatch_size = 1;
  CHECK(exec::validation_loss(one, flat, data, 5) == doctest::Approx(exec::validation_loss(o.model, flat, data, 5)).epsilon(1e-6));
  CHECK(losses[0] == doctest::Approx(exec::validation_loss(o.model, flat, data, 5)).epsilon(1e-5));
}

TEST_CASE("training log: --log writes CSV or JSON lines, one row per step, and a diverged run says where") {
  auto dir = fresh_dir("training-log");
  const std::string sched = (dir / "p.sched").string(), data = " --data " + test_corpus();
  REQUIRE(run_trainsim("gen 1f1b --stages 2 --microbatches 2 -o " + sched).exit_code == 0);
  CommandResult r = run_trainsim("replay " + sched + " --model tiny --steps 4 --eval-every 2 --eval-sequences 4 --log " +
                                 (dir / "l.csv").string() + data);
  REQUIRE(r.exit_code == 0);
  CHECK(has(r.out, "  val "));
  CHECK(has(r.out, "  lr 1.00e-03  grad norm "));
  std::stringstream csv(slurp(dir / "l.csv"));
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(csv, line)) lines.push_back(line);
  REQUIRE(lines.size() == 5);
  CHECK(lines[0] == "step,loss,lr,grad_norm,clip_coef,step_seconds,tokens_per_s,val_loss,peak_bytes_rank0,peak_bytes_rank1");
  CHECK(lines[1].rfind("1,", 0) == 0);
  auto fields = [](const std::string& l) {
    std::vector<std::string> f;
    std::stringstream ss(l);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    return f;
  };
  CHECK(fields(lines[1]).at(7).empty());   // no evaluation after step 1
  CHECK_FALSE(fields(lines[2]).at(7).empty());  // after step 2
  CHECK(fields(lines[4]).size() == 10);

  r = run_trainsim("replay " + sched + " --model tiny --steps 3 --json --log " + (dir / "l.jsonl").string() + data);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  std::stringstream jl(slurp(dir / "l.jsonl"));
  int rows = 0;
  while (std::getline(jl, line)) {
    const nlohmann::json row = nlohmann::json::parse(line);
    CHECK(row["step"] == rows + 1);
    CHECK(row["loss"].get<double>() == j["losses"][rows].get<double>());
    CHECK(row["grad_norm"].get<double>() == j["grad_norms"][rows].get<double>());
    CHECK(row["peak_bytes"].size() == 2);
    CHECK_FALSE(row.contains("val_loss"));
    ++rows;
  }
  CHECK(rows == 3);
  CHECK(j["step_peak_bytes"].size() == 3);
  CHECK(j["learning_rates"][0] == 0.001);

  // A run that diverges: its log's last row says why.
  r = run_trainsim("replay " + sched + " --model tiny --steps 6 --lr 1e30 --grad-clip 0 --log " +
                   (dir / "d.jsonl").string() + data, true);
  CHECK(r.exit_code == 1);
  const std::string log = slurp(dir / "d.jsonl");
  const std::string last = log.substr(log.rfind('\n', log.size() - 2) + 1);
  CHECK(has(last, "\"error\""));
  CHECK(has(last, "is not finite"));  // (the gradient norm, here, before the loss)
  CHECK(has(last, "the training diverged"));
  CHECK(has(r.out, "is not finite"));

  // Bad names and values are refused before any work.
  CHECK(run_trainsim("replay " + sched + " --model tiny --log x.txt").exit_code == 2);
  CHECK(run_trainsim("replay " + sched + " --model tiny --eval-sequences 0").exit_code == 2);
}

TEST_CASE("training log: a resumed run continues its log and its plot (issue 38)") {
  // Before, --resume with --log and --plot replaced both with the resumed steps alone.
  auto dir = fresh_dir("training-log-resume");
  const std::string sched = (dir / "p.sched").string(), data = " --data " + test_corpus();
  const std::string ck = (dir / "ck").string(), plot = (dir / "p.svg").string();
  REQUIRE(run_trainsim("gen 1f1b --stages 2 --microbatches 2 -o " + sched).exit_code == 0);
  for (const char* ext : {".csv", ".jsonl"}) {
    CAPTURE(ext);
    const std::string log = (dir / (std::string("l") + ext)).string();
    const bool csv = std::string(ext) == ".csv";
    auto rows = [&] {
      std::stringstream in(slurp(log));
      std::string line;
      std::vector<std::string> out;
      while (std::getline(in, line)) out.push_back(line);
      if (csv && !out.empty()) out.erase(out.begin());  // the header
      return out;
    };
    std::filesystem::remove_all(ck);
    REQUIRE(run_trainsim("replay " + sched + " --model tiny --steps 4 --stop-after 2 --save " + ck + " --log " + log +
                         data).exit_code == 0);
    const std::vector<std::string> first = rows();
    REQUIRE(first.size() == 2);
    // A row from a step the checkpoint does not hold (the run went on after its last save, then stopped): it goes.
    std::ofstream(log, std::ios::app) << (csv ? "3,9,0.001,1,1,0.1,100,,1,1\n" : "{\"step\":3,\"loss\":9}\n");
    CommandResult r = run_trainsim("replay " + sched + " --model tiny --steps 4 --resume " + ck + " --log " + log +
                                   " --plot " + plot + data);
    REQUIRE(r.exit_code == 0);
    const std::vector<std::string> all = rows();
    REQUIRE(all.size() == 4);
    CHECK(all[0] == first[0]);
    CHECK(all[1] == first[1]);
    for (int i = 0; i < 4; ++i) {
      const std::string step = csv ? all[i].substr(0, all[i].find(',')) : std::to_string(nlohmann::json::parse(all[i])["step"].get<int>());
      CHECK(step == std::to_string(i + 1));
    }
    CHECK(all[2].find(csv ? "3,9," : "\"loss\":9") == std::string::npos);  // the stale row is gone
    CHECK(has(slurp(plot), "4 steps on 2 ranks"));
  }
}
