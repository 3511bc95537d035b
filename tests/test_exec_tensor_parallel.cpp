// Real tensor parallelism in the executor (docs/executor.md, "Tensor parallelism"; Shoeybi et al. 2019,
// Megatron-LM): each rank computes with its TP slice of the matrices (heads, FFN columns, vocabulary rows),
// the reductions inside a layer run over the TP group's communicator, the schedule's all-reduces sum the
// partial sums, and the loss is the vocabulary-parallel cross-entropy. Replays of TP 2 and 4, TP x PP,
// TP x FSDP, TP x PP x DP equal single-device training within 1e-5 relative (fp32) over 3 steps, and a TP
// slice's initial weights are exactly the whole model's rows and columns.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "checkpoint_helpers.h"
#include "cli_helpers.h"
#include "exec/layout.h"
#include "exec_helpers.h"
#include "schedules/generators.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"
#include "tp_schedule_helpers.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

Schedule tp_schedule(const TpScheduleOptions& o) { return parse_schedule(tp_schedule_text(o), "tp.sched"); }

// The tiny model with 4 heads (so that TP 4 splits them), `blocks_per_layer` blocks per schedule layer.
exec::ReplayOptions tp_options(const Schedule& s, int blocks_per_layer = 1, int steps = 3) {
  exec::ReplayOptions o = tiny_options(s, steps);
  o.model.heads = 4;
  o.model.blocks = s.header.layers * blocks_per_layer;
  return o;
}

exec::ReplayResult check_equivalence(const TpScheduleOptions& t, const std::string& what, int blocks_per_layer = 1) {
  INFO(what);
  Schedule s = tp_schedule(t);
  SimResult sim = simulate(s);
  INFO(sim.error);
  REQUIRE(sim.ok);
  exec::ReplayOptions o = tp_options(s, blocks_per_layer);
  o.check = true;
  exec::ReplayResult r = exec::replay(s, o);
  INFO(r.error);
  CHECK(r.ok);
  CHECK(r.checked);
  CHECK(r.losses.size() == 3);
  CHECK(r.max_rel_diff_loss <= 1e-5);
  CHECK(r.max_rel_diff_weights <= 1e-5);
  CHECK(r.replicas_identical);  // the norm gains every TP slice holds stay the same bits
  for (double l : r.losses) CHECK(std::isfinite(l));
  if (r.losses.size() == 3) CHECK(r.losses.back() < r.losses.front());
  return r;
}

}  // namespace

TEST_CASE("exec TP: a slice's initial weights are exactly the whole model's rows and columns, each once") {
  exec::ModelConfig m = exec::preset("tiny");
  m.heads = 4, m.blocks = 2;
  for (int layers : {1, 2})
    for (int t : {2, 4}) {
      const auto specs = exec::partition(m, layers);
      for (const exec::LayerSpec& spec : specs) {
        const exec::LayerLayout whole(m, spec);
        std::vector<float> w(whole.size());
        exec::init_parameters(whole, 11, 0, whole.size(), w.data());
        std::map<std::string, std::vector<int>> seen;  // how often each element of each whole parameter is held
        for (const exec::ParamSpec& p : whole.params()) seen[p.name].assign(p.size(), 0);
        long total = 0;
        for (int j = 0; j < t; ++j) {
          const exec::LayerLayout slice(m, spec, j, t);
          total += slice.size();
          std::vector<float> v(slice.size());
          exec::init_parameters(slice, 11, 0, slice.size(), v.data());
          for (const exec::ParamSpec& p : slice.params()) {
            const exec::ParamSpec* q = nullptr;
            for (const exec::ParamSpec& c : whole.params())
              if (c.name == p.name) q = &c;
            REQUIRE(q);
            for (long e = 0; e < p.size(); ++e) {
              const long f = p.full_index(e);
              REQUIRE(f >= 0);
              REQUIRE(f < q->size());
              CHECK(v[p.offset + e] == w[q->offset + f]);
              ++seen[p.name][f];
            }
          }
        }
        // Every element of a split parameter in exactly one slice; the norm gains in every slice.
        for (const exec::ParamSpec& p : whole.params()) {
          const bool norm = p.role == exec::ParamRole::AttnNorm || p.role == exec::ParamRole::FfnNorm ||
                            p.role == exec::ParamRole::FinalNorm;
          for (int n : seen[p.name]) CHECK(n == (norm ? t : 1));
        }
        long norms = 0;
        for (const exec::ParamSpec& p : whole.params())
          if (p.role == exec::ParamRole::AttnNorm || p.role == exec::ParamRole::FfnNorm ||
              p.role == exec::ParamRole::FinalNorm)
            norms += p.size();
        CHECK(total == whole.size() + (t - 1) * norms);
      }
    }
}

TEST_CASE("exec TP: a model that does not split over the TP degree is a clear error") {
  exec::ModelConfig m = exec::preset("tiny");  // 2 heads, ffn 64, vocabulary 256
  const exec::LayerSpec spec = exec::partition(m, 1).front();
  CHECK_THROWS_WITH_AS(exec::LayerLayout(m, spec, 0, 4), doctest::Contains("the heads (2)"), std::invalid_argument);
  m.heads = 4, m.ffn = 66;
  CHECK_THROWS_WITH_AS(exec::LayerLayout(m, spec, 0, 4), doctest::Contains("the FFN size (66)"), std::invalid_argument);
  // Through a replay: the error, not a crash.
  Schedule s = tp_schedule({.tp = 4});
  exec::ReplayOptions o = tiny_options(s);
  exec::ReplayResult r = exec::replay(s, o);
  CHECK_FALSE(r.ok);
  CHECK(has(r.error, "must be multiples of 4: the heads (2) is not"));
}

TEST_CASE("exec TP: TP 2 and 4 over one layer train exactly like one device") {
  check_equivalence({.tp = 2}, "tp 2");
  check_equivalence({.tp = 4}, "tp 4");
  check_equivalence({.tp = 2, .microbatches = 1}, "tp 2, one microbatch");
  // Two blocks in the layer: the reductions between blocks run inside the op.
  check_equivalence({.tp = 2}, "tp 2, two blocks per layer", 2);
  check_equivalence({.tp = 2, .split_backward = true}, "tp 2, backward-input and backward-weight");
  check_equivalence({.tp = 2, .tp_stream = 1}, "tp 2, the TP all-reduces on stream 1");
}

TEST_CASE("exec TP: TP x PP (the middle layers' partial sums, the input grads') train exactly like one device") {
  check_equivalence({.tp = 2, .pp = 2}, "tp 2 x pp 2");
  check_equivalence({.tp = 2, .pp = 3, .split_backward = true}, "tp 2 x pp 3, split backward");
  check_equivalence({.tp = 4, .pp = 2}, "tp 4 x pp 2, two blocks per layer", 2);
}

TEST_CASE("exec TP: TP x FSDP (W<j/t>[s/n]) and TP x DP train exactly like one device") {
  check_equivalence({.tp = 2, .dp = 2, .fsdp = true}, "tp 2 x fsdp 2");
  check_equivalence({.tp = 2, .dp = 3, .fsdp = true}, "tp 2 x fsdp 3 (padded shards)");
  check_equivalence({.tp = 2, .dp = 2}, "tp 2 x dp 2");
}

TEST_CASE("exec TP: TP x PP x DP trains exactly like one device") {
  check_equivalence({.tp = 2, .pp = 2, .dp = 2}, "tp 2 x pp 2 x dp 2");
  check_equivalence({.tp = 2, .pp = 2, .dp = 2, .fsdp = true}, "tp 2 x pp 2 x fsdp 2");
}

TEST_CASE("exec TP: save and resume a TP x FSDP schedule, bit for bit") {
  Schedule s = tp_schedule({.tp = 2, .pp = 2, .dp = 2, .fsdp = true});
  ScopedDir scoped("ckpt-tp");
  const auto& dir = scoped.path;
  exec::ReplayOptions straight = tp_options(s, 1, 4);
  straight.save_dir = (dir / "straight").string();
  exec::ReplayResult a = exec::replay(s, straight);
  INFO(a.error);
  REQUIRE(a.ok);
  exec::ReplayOptions first = tp_options(s, 1, 4);
  first.stop_after = 2;
  first.save_dir = (dir / "half").string();
  exec::ReplayResult b = exec::replay(s, first);
  REQUIRE(b.ok);
  exec::ReplayOptions rest = tp_options(s, 1, 4);
  rest.resume_dir = (dir / "half").string();
  rest.save_dir = (dir / "resumed").string();
  exec::ReplayResult c = exec::replay(s, rest);
  INFO(c.error);
  REQUIRE(c.ok);
  REQUIRE(c.losses.size() == 2);
  CHECK(c.losses[0] == a.losses[2]);
  CHECK(c.losses[1] == a.losses[3]);
  for (int r = 0; r < s.header.world_size; ++r) {
    const std::string x = slurp(checkpoint_rank_file(dir / "straight", r));
    CHECK(!x.empty());
    CHECK(x == slurp(checkpoint_rank_file(dir / "resumed", r)));
    CHECK(has(x, "<" + std::to_string(r % 2) + "/2>"));  // the rank file names its TP slice
  }
}

TEST_CASE("exec TP: what the executor does not run is refused before any rank starts, with the reason") {
  SUBCASE("sequence parallelism whose sequence does not split") {
    // Stage 0's partial sum is also reduce-scattered into sequence shards (as sequence parallelism does): with
    // a sequence of 16 tokens it replays (tests/test_exec_sequence_parallel.cpp); with 15 it cannot split.
    std::string text = tp_schedule_text({.tp = 2, .pp = 2, .microbatches = 1});
    for (int j = 0; j < 2; ++j) {
      const std::string part = "A1{0}<+" + std::to_string(j) + "/2>", shard = "A1{0}[" + std::to_string(j) + "/2]";
      const auto at = text.find("  all-reduce group 1 : " + part + " -> A1{0}\n");
      REQUIRE(at != std::string::npos);
      text.insert(at, "  reduce-scatter group 1 : " + part + " -> " + shard + "\n  free : " + shard + "\n");
    }
    Schedule s = parse_schedule(text, "sp.sched");
    exec::ReplayOptions o = tp_options(s);
    o.check = true;
    exec::ReplayResult ok = exec::replay(s, o);
    INFO(ok.error);
    CHECK(ok.ok);
    CHECK(ok.max_rel_diff_weights <= 1e-5);
    o.model.seq = 15;
    exec::ReplayResult r = exec::replay(s, o);
    CHECK_FALSE(r.ok);
    INFO(r.error);
    CHECK(has(r.error, "A1{0}[0/2] is sequence shard 0 of 2, but a sequence of 15 tokens does not split"));
    CHECK(has(r.error, "sp.sched:"));
  }
  SUBCASE("a TP-sliced rank in no TP group") {
    std::string text = tp_schedule_text({.tp = 2});
    const auto at = text.find("group 1 tp0 0 1\n");
    REQUIRE(at != std::string::npos);
    text.replace(at, 16, "group 1 x0 0 1\n");
    Schedule s = parse_schedule(text, "notp.sched");
    exec::ReplayResult r = exec::replay(s, tp_options(s));
    CHECK_FALSE(r.ok);
    INFO(r.error);
    CHECK(has(r.error, "rank 0: forward layer 0 batches {0} (notp.sched:11): it computes a TP slice of 2, but rank 0 is "
                       "in no TP group"));
  }
}

TEST_CASE("exec TP: the generators' TP schedules (gen tp, gen 3d) train as one device does") {
  struct Case {
    const char* kind;
    int tp, pp, dp, zero;
    bool sp;
  };
  for (const Case& c : {Case{"tp", 2, 1, 1, 0, false}, Case{"3d", 2, 2, 2, 0, false}, Case{"3d", 2, 2, 2, 3, false},
                        Case{"3d", 2, 2, 1, 1, false}}) {
    GenOptions g;
    g.tp = c.tp, g.pp = c.pp, g.dp = c.dp, g.zero = c.zero, g.sequence_parallel = c.sp;
    g.microbatches = 2;
    Schedule s = generate(c.kind, g);
    CAPTURE(c.kind);
    CAPTURE(c.pp);
    CAPTURE(c.zero);
    REQUIRE(simulate(s).ok);
    exec::ReplayOptions o = tp_options(s);
    o.check = true;
    exec::ReplayResult r = exec::replay(s, o);
    INFO(r.error);
    REQUIRE(r.ok);
    CHECK(r.checked);
    CHECK(r.max_rel_diff_loss <= 1e-5);
    CHECK(r.max_rel_diff_weights <= 1e-5);
  }
}
