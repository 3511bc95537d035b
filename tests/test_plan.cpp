// trainsim plan (issue 34): the search space and its pruning counts, the closed-form bounds against the
// simulation, determinism on any number of threads, the launch configurations read back by the importers to the
// same schedule and prediction, and the command's JSON.
#include <doctest/doctest.h>

#include <cstdio>
#include <functional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "hardware/setting.h"
#include "interop/framework_emit.h"
#include "plan/planner.h"
#include "schedules/generators.h"
#include "schedules/hardware_sim.h"

using namespace trainsim;
using namespace trainsim::plan;

namespace {

// Llama 3 8B cut to 8 blocks on 16 H100s (8 per node), 4,096 tokens: small enough to simulate every candidate.
PlanRequest small_request() {
  PlanRequest r;
  r.model = hw::model_preset("llama3-8b");
  r.model.blocks = 8;
  r.model.preset = "custom";
  r.device = hw::load_device("h100-sxm");
  r.network = hw::load_network("nvlink8-ib400");
  r.gpus = 16;
  r.global_batch = 32;
  r.seq = 4096;
  return r;
}

// The step of a FrameworkPlan as gen --from-megatron / --from-torchtitan simulates it.
double simulated_step(const FrameworkPlan& p, const PlanRequest& r) {
  auto source = generate_ranks(p.kind, per_block_layers(p.kind, p.options, p.model.blocks));
  source->header().cost_model = "hardware";
  source->header().hardware = setting_of(p, r.device, r.network);
  const HardwareRun run = simulate_hardware(*source, false);
  REQUIRE(run.report);
  return run.report->step_time_s;
}

}  // namespace

TEST_CASE("plan: every combination is enumerated once or counted under the rule that removed it") {
  PlanRequest r = small_request();
  const Enumeration en = enumerate(r);
  const SearchSpace d = default_space(r);
  CHECK(d.tp == std::vector<int>{1, 2, 4, 8});
  long long removed = 0;
  for (const auto& [why, n] : en.removed) removed += n;
  CHECK(en.removed.count("indivisible"));
  CHECK(en.removed.count("redundant"));
  // (PyTorch's interleaved rounds: a count the generator would refuse is removed here, not simulated as invalid)
  for (const Candidate& c : en.candidates)
    CHECK(interleaved_rounds_fit(c.knobs.schedule, c.knobs.pp, c.knobs.microbatches));
  std::set<std::string> seen;
  for (const Candidate& c : en.candidates) {
    const Knobs& k = c.knobs;
    CHECK(static_cast<long long>(k.tp) * k.cp * k.pp * k.dp == r.gpus);
    CHECK(static_cast<long long>(k.dp) * k.microbatch_size * k.microbatches == r.global_batch);
    CHECK(k.tp <= r.network.gpus_per_node);
    int blocks = 0;
    for (int b : c.config.options.chunk_blocks) blocks += b;
    CHECK(blocks == r.model.blocks);
    CHECK(seen.insert(gen_command(c.config)).second);  // no configuration twice
  }
  // A fixed knob narrows the search to it.
  r.space.tp = {2};
  r.space.pp = {2};
  for (const Candidate& c : enumerate(r).candidates) CHECK((c.knobs.tp == 2 && c.knobs.pp == 2));
  // TP wider than a node is counted, not searched.
  r.space.tp = {16};
  const Enumeration wide = enumerate(r);
  CHECK(wide.candidates.empty());
  CHECK(wide.removed.at("tp_across_nodes") > 0);
}

TEST_CASE("plan: the memory and time bounds are below what the simulation gives, on every candidate") {
  PlanRequest r = small_request();
  r.space.microbatch_size = {1, 2};
  const Enumeration en = enumerate(r);
  REQUIRE(en.candidates.size() > 100);
  int checked = 0;
  for (std::size_t i = 0; i < en.candidates.size(); i += 3) {  // a third of them, every kind of knob among them
    const Candidate& c = en.candidates[i];
    const Evaluation e = evaluate(c, r);
    if (!e.simulated()) continue;
    INFO(gen_command(c.config));
    CHECK(memory_lower_bound(c, r) <= e.peak_memory_bytes);
    CHECK(time_lower_bound(c, r) <= e.step_time_s);
    CHECK(e.simulated_ranks == (c.knobs.pp == 1 && c.knobs.tp * c.knobs.cp * c.knobs.dp == 1 ? 1 : c.knobs.pp));
    ++checked;
  }
  CHECK(checked > 50);
}

TEST_CASE("plan: the same answer on one thread and on four, byte for byte") {
  PlanRequest r = small_request();
  r.space.recompute = {hw::Recompute::None, hw::Recompute::Full};
  r.top = 3;
  const PlanResult one = run_plan(r, 1), four = run_plan(r, 4);
  REQUIRE(one.rows.size() == four.rows.size());
  CHECK(one.rejected == four.rejected);
  CHECK(one.simulated == four.simulated);
  REQUIRE(!one.rows.empty());
  CHECK(one.rows.front().fits());
  for (std::size_t i = 0; i < one.rows.size(); ++i) {
    CHECK(gen_command(one.rows[i].candidate.config) == gen_command(four.rows[i].candidate.config));
    CHECK(one.rows[i].eval.step_time_s == four.rows[i].eval.step_time_s);
    CHECK(one.rows[i].eval.peak_memory_bytes == four.rows[i].eval.peak_memory_bytes);
  }
  // Best first: no fitting row is faster than one above it.
  for (std::size_t i = 1; i < one.rows.size(); ++i)
    if (one.rows[i].fits()) CHECK(one.rows[i - 1].eval.tokens_per_s_per_gpu >= one.rows[i].eval.tokens_per_s_per_gpu);
}

TEST_CASE("plan: the Megatron-LM line of a candidate reads back to the same schedule and prediction") {
  PlanRequest r = small_request();
  r.model = hw::model_preset("llama3-8b");  // a preset: gen --from-megatron --model llama3-8b
  r.gpus = 32;
  r.global_batch = 64;
  r.framework = Framework::Megatron;
  r.space.recompute = {hw::Recompute::Selective, hw::Recompute::Full};
  r.space.microbatch_size = {1};
  const Enumeration en = enumerate(r);
  int exact = 0;
  std::set<std::string> kinds;
  for (std::size_t i = 0; i < en.candidates.size(); i += 5) {
    const Candidate& c = en.candidates[i];
    INFO(gen_command(c.config));
    const FrameworkLaunch l = to_megatron(c.config);
    INFO(l.text << " / " << l.note);
    REQUIRE(l.exact);
    FrameworkInputs in;
    in.dp = c.knobs.dp, in.dp_given = true, in.model = r.model;
    const FrameworkPlan back = from_megatron(l.text, in);
    CHECK(same_configuration(c.config, back));
    if (exact < 6) CHECK(simulated_step(back, r) == evaluate(c, r).step_time_s);
    kinds.insert(c.knobs.schedule + "/" + c.knobs.layout);
    ++exact;
  }
  CHECK(exact > 10);
  CHECK(kinds.count("interleaved-1f1b/balanced"));
  CHECK(kinds.count("1f1b/even"));
  // What Megatron-LM does not run is said, not written.
  Candidate zbv = en.candidates.front();
  zbv.config.options.schedule = "zbv";
  CHECK(to_megatron(zbv.config).text.empty());
  CHECK(!to_megatron(zbv.config).note.empty());
}

TEST_CASE("plan: the torchtitan TOML of a candidate reads back to the same schedule and prediction") {
  PlanRequest r = small_request();
  r.model = hw::model_preset("llama3-8b");
  r.gpus = 32;
  r.global_batch = 64;
  r.framework = Framework::Torchtitan;
  r.space.microbatch_size = {1};
  r.space.recompute = {hw::Recompute::None, hw::Recompute::Selective};
  const Enumeration en = enumerate(r);
  int exact = 0;
  std::set<std::string> schedules;
  for (std::size_t i = 0; i < en.candidates.size(); i += 3) {
    const Candidate& c = en.candidates[i];
    // torchtitan runs FSDP alone (no TP, PP or CP) as its own FSDP, gen fsdp: another schedule.
    if (c.knobs.tp == 1 && c.knobs.pp == 1 && c.knobs.cp == 1) continue;
    INFO(gen_command(c.config));
    const FrameworkLaunch l = to_torchtitan_toml(c.config);
    INFO(l.text << " / " << l.note);
    if (c.knobs.pp > 1 && c.knobs.layout == "balanced" && c.knobs.chunks == 1) REQUIRE(l.exact);
    if (!l.exact) continue;
    FrameworkInputs in;
    in.dp = c.knobs.dp, in.dp_given = true;
    const FrameworkPlan back = from_torchtitan_toml(l.text, in);
    CHECK(same_configuration(c.config, back));
    if (exact < 6) CHECK(simulated_step(back, r) == evaluate(c, r).step_time_s);
    schedules.insert(c.knobs.schedule);
    ++exact;
  }
  CHECK(exact > 10);
  CHECK(schedules.count("zbv"));
  CHECK(schedules.count("dualpipev"));
}

TEST_CASE("trainsim plan --json: simulated, rejected, candidates best first with knobs and figures by flag name") {
  const auto r = testing::run_trainsim(
      "plan --model llama3-8b --gpus 16 --global-batch 32 --seq 2048 --tp 2,4 --pp 2 --recompute selective "
      "--microbatch-size 1 --threads 2 --json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["simulated"].get<long long>() > 0);
  CHECK(j["rejected"].is_object());
  REQUIRE(j["candidates"].size() > 1);
  const auto& best = j["candidates"][0];
  for (const char* k : {"tp", "cp", "pp", "chunks", "dp", "microbatch_size", "microbatches", "schedule", "zero",
                        "recompute", "sp", "fp8", "layout", "step_time_s", "tokens_per_s_per_gpu", "mfu",
                        "peak_memory_bytes", "bubble_fraction", "exposed_comm_share", "gen_command", "megatron_args",
                        "torchtitan_toml"})
    CHECK_MESSAGE(best.contains(k), k);
  CHECK(j["candidates"][1].contains("gen_command") == false);  // only the winner is emitted by default
  // The gen command reproduces the winner's step time.
  std::string gen = best["gen_command"].get<std::string>();
  REQUIRE(gen.rfind("trainsim ", 0) == 0);
  const auto again = testing::run_trainsim(gen.substr(9) + " --json");
  REQUIRE(again.exit_code == 0);
  CHECK(nlohmann::json::parse(again.out)["step_time_s"].get<double>() == best["step_time_s"].get<double>());
}

TEST_CASE("trainsim plan: bad options are clear errors") {
  auto r = testing::run_trainsim("plan --model llama3-8b --gpus 16 --global-batch 32 --schedules 1f1b,gpipe", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("--schedules: 'gpipe'") != std::string::npos);
  r = testing::run_trainsim("plan --model llama3-8b --gpus 16 --global-batch 32 --tp two", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("--tp: 'two' is not a count") != std::string::npos);
  r = testing::run_trainsim("plan --model llama3-8b --gpus 16 --global-batch 32 --fp8 on --device a100-80g", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("FP8") != std::string::npos);
  r = testing::run_trainsim("plan --model nosuchmodel --gpus 16 --global-batch 32", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("--model") != std::string::npos);
}

TEST_CASE("trainsim plan: schedules compared at fixed degrees, with their timelines on one time axis") {
  const std::string svg = "plan_compare_test.svg";
  std::remove(svg.c_str());
  const auto r = testing::run_trainsim(
      "plan --model llama3-8b --gpus 16 --global-batch 32 --seq 2048 --tp 2 --pp 4 --dp 2 --microbatch-size 1 "
      "--recompute selective --layout even --zero 1 --chunks 2 --schedules all --timelines " + svg + " --json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  std::set<std::string> schedules;
  for (const auto& c : j["candidates"]) {
    CHECK(c["tp"] == 2);
    CHECK(c["pp"] == 4);
    CHECK(c["dp"] == 2);
    CHECK(c["stage_peak_memory_bytes"].size() == 4);
    schedules.insert(c["schedule"].get<std::string>());
  }
  CHECK(schedules.size() == 6);
  const std::string text = testing::slurp(svg);
  // One timeline per schedule that fits, each titled with its schedule, under the model's heading.
  CHECK(text.find("llama3-8b on 16 x h100-sxm") != std::string::npos);
  for (const std::string& s : schedules)
    if (j["candidates"][0]["fits"].get<bool>()) CHECK(text.find(" " + s + ": TP 2") != std::string::npos);
  std::remove(svg.c_str());
}

TEST_CASE("trainsim plan: lost output fails, and a question the generator refuses everywhere says why") {
  // Standard output on a full device: exit 2, not a plan nobody read (issue 38's class).
  auto r = testing::run_shell(std::string(TRAINSIM_BINARY) +
                              " plan --model llama3-8b --gpus 8 --global-batch 8 --seq 1024 --tp 8 --pp 1 "
                              "--recompute none --microbatch-size 1 --json > /dev/full 2>&1");
  CHECK(r.exit_code == 2);
  // Two billion GPUs: every candidate is beyond what the generator makes; the reason is given, not "does not fit".
  r = testing::run_trainsim("plan --model llama3-8b --gpus 2000000000 --global-batch 2000000000 --threads 1", true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("the generator refused every candidate, e.g.: ") != std::string::npos);
}

TEST_CASE("plan: without pipelining one candidate stands for every layout, whatever the order of the list") {
  PlanRequest r = small_request();
  r.space.tp = {8};
  r.space.pp = {1};
  r.space.microbatch_size = {1};
  r.space.recompute = {hw::Recompute::None};
  r.space.zero = {1};
  const Enumeration en = enumerate(r);
  REQUIRE(en.candidates.size() == 1);
  CHECK(en.candidates.front().knobs.layout == "even");
}

namespace {

// Mixtral's blocks cut to 4, the first dense, on 16 H100s at 1,024 tokens: small enough to simulate every candidate.
PlanRequest moe_request() {
  PlanRequest r = small_request();
  r.model = hw::model_preset("mixtral-8x7b");
  r.model.blocks = 4, r.model.dense_blocks = 1;
  r.model.preset = "custom";
  r.seq = 1024;
  r.global_batch = 32;
  return r;
}

// The error enumerate gives moe_request() changed by `change`, or "no error".
std::string refused(const std::function<void(PlanRequest&)>& change) {
  PlanRequest q = moe_request();
  change(q);
  try {
    enumerate(q);
  } catch (const hw::SpecError& e) {
    return std::string(e.what());
  }
  return std::string("no error");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("plan, Mixture of Experts: EP searched where it divides the experts and TP x DP, TP beside it, the rest refused by name") {
  PlanRequest r = moe_request();
  const SearchSpace d = default_space(r);
  CHECK(d.ep == std::vector<int>{1, 2, 4, 8});
  CHECK(d.tp == std::vector<int>{1, 2});  // TP beside EP, as far as MoE recipes take it
  CHECK(d.etp == std::vector<int>{1});  // expert TP 1, as the recipes (--etp 1,2 adds Megatron-LM's default)
  CHECK(d.cp == std::vector<int>{1});
  CHECK(d.zero == std::vector<int>{1});
  CHECK(d.schedules == default_space(small_request()).schedules);  // the framework's: zero-bubble and DualPipeV too
  const Enumeration en = enumerate(r);
  std::set<int> eps, etps;
  for (const Candidate& c : en.candidates) {
    const Knobs& k = c.knobs;
    const GenOptions& o = c.config.options;
    INFO(gen_command(c.config));
    // EP carved out of TP x DP: whole TP groups in each EP group with expert TP 1, one TP index of each with expert
    // TP equal to TP; without EP every expert split over the TP group; SP with TP.
    CHECK((k.tp * k.dp) % (k.ep * (k.ep > 1 ? k.etp : 1)) == 0);
    if (k.tp > 1 && k.ep > 1) CHECK(((k.etp == 1 ? k.ep % k.tp == 0 : k.etp == k.tp) && k.sp));
    if (k.tp > 1) CHECK(k.sp);
    if (k.tp == 1) CHECK(k.etp == 1);
    if (k.ep == 1) CHECK(k.etp == k.tp);  // (without EP every expert is split over the TP group)
    CHECK(o.ep == k.ep);
    CHECK(o.etp == (k.ep > 1 ? k.etp : 1));
    CHECK((gen_command(c.config).find(" --ep ") != std::string::npos) == (k.ep > 1));
    CHECK((gen_command(c.config).find(" --etp ") != std::string::npos) == (k.ep > 1 && k.etp > 1));
    etps.insert(k.etp);
    // The dense first block stays dense: gen 3d --ep's --dense-layers from the model, as gen takes it.
    if (k.ep > 1) CHECK(o.dense_layers == model_dense_layers("3d", o, 4, 1).dense_layers);
    if (k.ep > 1) CHECK(o.dense_layers == 1);
    eps.insert(k.ep);
  }
  CHECK(eps == std::set<int>{1, 2, 4, 8});
  CHECK(etps == std::set<int>{1, 2});  // (2: TP 2 without EP, every expert split over the TP group)
  CHECK(std::none_of(en.candidates.begin(), en.candidates.end(),
                     [](const Candidate& c) { return c.knobs.ep > 1 && c.knobs.etp > 1; }));
  {
    // --etp 1,2: expert TP equal to TP beside EP too, one TP index of EP TP groups.
    PlanRequest q = moe_request();
    q.space.etp = {1, 2};
    int split = 0;
    for (const Candidate& c : enumerate(q).candidates) {
      const Knobs& k = c.knobs;
      if (k.ep == 1 || k.etp == 1) continue;
      INFO(gen_command(c.config));
      CHECK(k.etp == k.tp);
      CHECK((k.cp * k.dp) % k.ep == 0);
      CHECK(c.config.options.etp == 2);
      CHECK(gen_command(c.config).find(" --etp 2") != std::string::npos);
      ++split;
    }
    CHECK(split > 0);
  }
  CHECK(std::any_of(en.candidates.begin(), en.candidates.end(), [](const Candidate& c) { return c.knobs.tp > 1; }));
  CHECK(en.removed.at("indivisible") > 0);  // EP 8 over the 2 or 4 DP ranks of 8 or 4 stages
  // An imbalance above a slice's reach (all its group's tokens) removes that EP degree, counted.
  r.moe_imbalance = 3;
  const Enumeration skewed = enumerate(r);
  CHECK(skewed.removed.at("imbalance") > 0);
  for (const Candidate& c : skewed.candidates) {
    CHECK(c.knobs.ep != 2);
    CHECK(c.config.options.moe_imbalance == (c.knobs.ep > 1 ? 3.0 : 0.0));
  }
  r.moe_imbalance = 0;
  // --a2a-overlap: every candidate with expert slices overlaps its all-to-alls, and its gen line says so.
  r.a2a_overlap = true;
  for (const Candidate& c : enumerate(r).candidates) {
    CHECK(c.config.options.a2a_overlap == (c.knobs.ep > 1));
    CHECK((gen_command(c.config).find(" --a2a-overlap") != std::string::npos) == (c.knobs.ep > 1));
  }
  r.a2a_overlap = false;
  // What gen 3d --ep does not run, given anyway: a clear error naming the flag.
  // CP with EP: the EP groups carved out of TP x CP x DP.
  {
    PlanRequest q = moe_request();
    q.space.cp = {2};
    const Enumeration with_cp = enumerate(q);
    REQUIRE_FALSE(with_cp.candidates.empty());
    for (const Candidate& c : with_cp.candidates)
      CHECK((c.knobs.tp * c.knobs.cp * c.knobs.dp) % c.knobs.ep == 0);
    CHECK(std::any_of(with_cp.candidates.begin(), with_cp.candidates.end(),
                      [](const Candidate& c) { return c.knobs.ep > c.knobs.tp * c.knobs.dp; }));
  }
  // FSDP with EP (the experts sharded over their expert-data-parallel group) is searched when asked.
  {
    PlanRequest q = moe_request();
    q.space.zero = {3};
    const Enumeration fsdp = enumerate(q);
    CHECK(std::any_of(fsdp.candidates.begin(), fsdp.candidates.end(),
                      [](const Candidate& c) { return c.knobs.zero == 3 && c.knobs.ep > 1; }));
  }
  CHECK(contains(refused([](PlanRequest& q) { q.space.ep = {3}; }), "--ep 3: the EP degree must divide the model's 8"));
  CHECK(contains(refused([](PlanRequest& q) { q.framework = Framework::Torchtitan, q.space.etp = {1, 2}; }),
                 "--etp with --framework torchtitan"));
  CHECK(contains(refused([](PlanRequest& q) { q.space.etp = {1, 4}; }),
                 "--etp 4: expert TP is 1 or a candidate's TP degree, and no TP degree searched is 4"));
  CHECK(contains(refused([](PlanRequest& q) { q.model = hw::model_preset("llama3-8b"), q.space.etp = {2}; }),
                 "--etp: the model 'llama3-8b' has no experts"));
  {
    PlanRequest q = moe_request();
    q.framework = Framework::Torchtitan;
    CHECK(default_space(q).etp == std::vector<int>{1});
    q.framework = Framework::Any;
    q.space.etp = {2};  // expert TP 2 only: TP 2 beside EP or without it, TP 1 only without EP
    for (const Candidate& c : enumerate(q).candidates) {
      CHECK(c.knobs.etp == c.knobs.tp);
      CHECK((c.knobs.tp == 2 || c.knobs.ep == 1));
    }
  }
  CHECK(contains(refused([](PlanRequest& q) { q.framework = Framework::Torchtitan, q.a2a_overlap = true; }),
                 "--a2a-overlap with --framework torchtitan"));
  CHECK(contains(refused([](PlanRequest& q) { q.moe_imbalance = 0.5; }), "--moe-imbalance 0.5"));
  CHECK(contains(refused([](PlanRequest& q) { q.model = hw::model_preset("llama3-8b"), q.space.ep = {2}; }),
                 "--ep: the model 'llama3-8b' has no experts"));
  CHECK(contains(refused([](PlanRequest& q) { q.model = hw::model_preset("llama3-8b"), q.a2a_overlap = true; }),
                 "--a2a-overlap: the model 'llama3-8b' has no experts"));
  CHECK(contains(refused([](PlanRequest& q) {
                   q.model = hw::model_preset("llama3-8b"), q.moe_dispatcher = hw::MoeDispatcher::DeepEP;
                 }),
                 "--moe-dispatcher deepep: the model 'llama3-8b' has no experts"));
  PlanRequest dense = small_request();
  dense.space.ep = {1, 1};  // (EP 1 given twice is EP 1: a dense model's only degree)
  CHECK(enumerate(dense).candidates.size() == enumerate(small_request()).candidates.size());
}

TEST_CASE("plan, Mixture of Experts: bounds below the simulation, the symmetric figures the full simulation's") {
  PlanRequest r = moe_request();
  r.space.microbatch_size = {1};
  r.space.recompute = {hw::Recompute::None, hw::Recompute::Full};
  r.space.etp = {1, 2};  // (expert TP beside EP too)
  const Enumeration en = enumerate(r);
  REQUIRE(en.candidates.size() > 20);
  int checked = 0, full = 0;
  for (const Candidate& c : en.candidates) {
    const Evaluation e = evaluate(c, r);
    INFO(gen_command(c.config));
    REQUIRE(e.simulated());
    CHECK(memory_lower_bound(c, r) <= e.peak_memory_bytes);
    CHECK(time_lower_bound(c, r) <= e.step_time_s);
    // Balanced routing: one rank a stage stands for every expert slice.
    if (c.knobs.dp > 1) CHECK(e.simulated_ranks == c.knobs.pp);
    // One configuration, one answer: every rank simulated gives the same figures (a few candidates of each EP).
    if (checked % 4 == 0) {
      auto source = generate_ranks("3d", c.config.options);
      source->header().cost_model = "hardware";
      source->header().hardware = setting_of(c.config, r.device, r.network);
      const HardwareRun run = simulate_hardware(*source, false);
      REQUIRE(run.report);
      CHECK(run.report->step_time_s == e.step_time_s);
      CHECK(run.report->peak_memory_bytes == e.peak_memory_bytes);
      ++full;
    }
    ++checked;
  }
  CHECK(full > 5);
  // The imbalance costs time on the same configuration: the busiest slice sets the step.
  PlanRequest skewed = r;
  skewed.moe_imbalance = 1.5;
  int slower = 0;
  const Enumeration en2 = enumerate(skewed);
  REQUIRE(en2.candidates.size() == en.candidates.size());
  for (std::size_t i = 0; i < en.candidates.size(); ++i) {
    if (en.candidates[i].knobs.ep == 1) continue;
    INFO(gen_command(en2.candidates[i].config));
    const Evaluation a = evaluate(en.candidates[i], r), b = evaluate(en2.candidates[i], skewed);
    CHECK(b.step_time_s > a.step_time_s);
    CHECK(b.peak_memory_bytes > a.peak_memory_bytes);
    if (en2.candidates[i].knobs.dp > 1) CHECK(b.simulated_ranks == en2.candidates[i].knobs.pp * en2.candidates[i].knobs.ep);
    ++slower;
    if (slower == 6) break;
  }
  CHECK(slower == 6);
}

TEST_CASE("plan, Mixture of Experts: measured per-expert loads rank each EP degree by its own slices' loads") {
  PlanRequest r = moe_request();  // (8 experts)
  r.space.microbatch_size = {1};
  r.space.recompute = {hw::Recompute::Full};
  r.per_expert_load = {4, 1, 1, 1, 1, 1, 1, 2};  // (a hot expert 0: EP 2's slices 7:5, EP 8's 4:1:...:2 over 1.5)
  const Enumeration en = enumerate(r);
  int checked = 0;
  for (const Candidate& c : en.candidates) {
    if (c.knobs.ep == 1) {
      CHECK(c.config.options.per_expert_load.empty());
      continue;
    }
    CHECK(c.config.options.per_expert_load == r.per_expert_load);
    // Its gen line carries the slices' loads, exactly: the same schedule, the same step, without the file.
    const std::string line = gen_command(c.config);
    const std::vector<double> slices = slice_loads(r.per_expert_load, c.knobs.ep);
    CHECK(slices.front() == (c.knobs.ep == 2 ? 7 / 6.0 : c.knobs.ep == 4 ? 5 / 3.0 : 4 / 1.5));
    std::string want = " --expert-load ";
    for (std::size_t j = 0; j < slices.size(); ++j) want += fmt::format("{}{}", j ? "," : "", slices[j]);
    CHECK(line.find(want + " ") != std::string::npos);
    if (checked++ % 5) continue;
    GenOptions back = c.config.options;
    back.per_expert_load.clear(), back.expert_load = slices;
    CHECK(generate("3d", back).header.expert_load == generate("3d", c.config.options).header.expert_load);
    // Slower than balanced, as the busiest slice sets the step.
    const Candidate balanced = [&] {
      Candidate b = c;
      b.config.options.per_expert_load.clear();
      return b;
    }();
    PlanRequest even = r;
    even.per_expert_load.clear();
    CHECK(evaluate(c, r).step_time_s > evaluate(balanced, even).step_time_s);
  }
  CHECK(checked > 5);
  CHECK(contains(refused([](PlanRequest& q) { q.per_expert_load = {1, 1}; }),
                 "--expert-load-file gives 2 experts' loads, but the model 'custom' has 8 experts"));
  CHECK(contains(refused([](PlanRequest& q) { q.per_expert_load = std::vector<double>(8, 1.0), q.moe_imbalance = 2; }),
                 "give --expert-load-file or --moe-imbalance, not both"));
}

TEST_CASE("plan, Mixture of Experts: the winner's Megatron-LM line reads back to the same configuration and step") {
  PlanRequest r = moe_request();
  r.model = hw::model_preset("mixtral-8x7b");  // a preset, as gen --from-megatron --model mixtral-8x7b takes it
  r.model.blocks = 4;  // (then custom: its MoE fields written out)
  r.gpus = 16;
  r.framework = Framework::Megatron;
  r.space.microbatch_size = {1};
  r.space.recompute = {hw::Recompute::Full};
  r.space.ep = {4};
  r.space.etp = {1, 2};
  const Enumeration en = enumerate(r);
  REQUIRE(!en.candidates.empty());
  int read = 0;
  bool split_read = false;
  for (const Candidate& c : en.candidates) {
    INFO(gen_command(c.config));
    const FrameworkLaunch l = to_megatron(c.config);
    INFO(l.text << " / " << l.note);
    REQUIRE(l.exact);
    CHECK(l.text.find("--num-experts 8 --moe-router-topk 2") != std::string::npos);
    CHECK(l.text.find("--expert-model-parallel-size 4") != std::string::npos);
    CHECK(l.text.find("--moe-token-dispatcher-type alltoall") != std::string::npos);
    FrameworkInputs in;
    in.dp = c.knobs.dp, in.dp_given = true, in.model = r.model;
    const FrameworkPlan back = from_megatron(l.text, in);
    CHECK(same_configuration(c.config, back));
    CHECK(back.options.ep == 4);
    CHECK(back.options.etp == c.knobs.etp);
    if (read < 3 || (c.knobs.etp > 1 && !split_read)) CHECK(simulated_step(back, r) == evaluate(c, r).step_time_s);
    split_read = split_read || c.knobs.etp > 1;
    ++read;
  }
  CHECK(read > 3);
  CHECK(split_read);  // (expert TP 2 beside TP 2, Megatron-LM's default, among them)
  // With DeepEP's dispatch (--moe-dispatcher deepep): the line runs Megatron-LM's flex dispatcher, read back the same.
  r.moe_dispatcher = hw::MoeDispatcher::DeepEP;
  const Enumeration deep = enumerate(r);
  REQUIRE(!deep.candidates.empty());
  const Candidate& c = deep.candidates.front();
  CHECK(c.config.moe_dispatcher == hw::MoeDispatcher::DeepEP);
  const FrameworkLaunch l = to_megatron(c.config);
  INFO(l.text << " / " << l.note);
  CHECK(l.exact);
  CHECK(l.text.find("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep") != std::string::npos);
  FrameworkInputs in;
  in.dp = c.knobs.dp, in.dp_given = true, in.model = r.model;
  CHECK(simulated_step(from_megatron(l.text, in), r) == evaluate(c, r).step_time_s);
}

TEST_CASE("plan, Mixture of Experts, torchtitan: FSDP of the experts, the winner's TOML reads back to the same step") {
  // torchtitan's EP borrows TP and part of the FSDP shards (expert TP 1): the planner searches FSDP (--zero 3) and
  // writes expert_parallel_degree; the TOML read back is the same configuration and the same simulated step.
  PlanRequest r = small_request();
  r.model = hw::model_preset("qwen3-30b-a3b");  // (a torchtitan flavor: qwen3 30B-A3B)
  r.gpus = 8, r.global_batch = 16, r.seq = 1024;
  r.framework = Framework::Torchtitan;
  r.space.microbatch_size = {1};
  r.space.recompute = {hw::Recompute::Full};
  r.space.pp = {1, 2};
  r.space.ep = {8};
  r.space.tp = {1, 2};
  r.space.schedules = {"1f1b"};
  const Enumeration en = enumerate(r);
  REQUIRE(!en.candidates.empty());
  int read = 0;
  for (const Candidate& c : en.candidates) {
    INFO(gen_command(c.config));
    CHECK(c.knobs.zero == 3);
    const FrameworkLaunch l = to_torchtitan_toml(c.config);
    INFO(l.text << " / " << l.note);
    REQUIRE(l.exact);
    CHECK(l.text.find("name = \"qwen3\"\nflavor = \"30B-A3B\"") != std::string::npos);
    CHECK(l.text.find("expert_parallel_degree = 8\nexpert_tensor_parallel_degree = 1") != std::string::npos);
    FrameworkInputs in;
    in.dp = c.knobs.dp, in.dp_given = true;
    const FrameworkPlan back = from_torchtitan_toml(l.text, in);
    CHECK(same_configuration(c.config, back));
    if (read < 2) CHECK(simulated_step(back, r) == evaluate(c, r).step_time_s);
    ++read;
  }
  CHECK(read >= 2);
  // torchtitan has no all-to-all overlap: asked for, a clear error.
  r.a2a_overlap = true;
  CHECK_THROWS_WITH_AS(enumerate(r), doctest::Contains("--a2a-overlap with --framework torchtitan"), hw::SpecError);
}
