// A schedule layer is a modelling unit (docs/hardware-model.md §3c): the same 3D run described with one schedule
// layer per transformer block and with one per stage gets the same step time, bubble, exposed communication (the
// TP communication inside compute ops and at the layers' ends alike) and per-stage peak memory. Without data
// parallelism the two must agree to rounding: nothing else a schedule layer is (a DP bucket, an FSDP unit) is in
// the run. With it, the coarse run reduces each stage's grads as one bucket after the last backward where the fine
// one reduces block by block under the backward: it may only be slower, and holds about as much (a whole stage's
// grads twice while they are reduced, against a few blocks' beside the last backward's activations).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "hardware_run_helpers.h"

using namespace trainsim;
using namespace trainsim::hw;

namespace {

struct Figures {
  double step = 0, bubble = 0, exposed = 0, tp_exposed = 0;
  std::vector<double> stage_peak;
};

Figures run(int tp, int pp, int dp, int m, bool sp, int layers, const std::string& schedule, int chunks,
            TpOverlap overlap, Recompute r) {
  GenOptions o;
  o.tp = tp, o.pp = pp, o.dp = dp, o.microbatches = m, o.sequence_parallel = sp, o.schedule = schedule;
  o.chunks = chunks, o.layers = layers;
  ModelSpec model = model_preset("llama3-8b");
  model.blocks = 16;
  HardwareSetting hs = testing::h100_setting(model, 4096);
  hs.recompute = r;
  hs.tp_overlap = overlap;
  if (layers == 0) o = per_block_layers("3d", o, hs.model.blocks);
  const StepReport report = testing::simulate_generated("3d", o, hs);
  Figures f{report.step_time_s, report.bubble_fraction, report.exposed_comm_s, report.tp_comm_exposed_s, {}};
  for (const StageMemory& s : report.stages) f.stage_peak.push_back(s.peak.total());
  return f;
}

}  // namespace

TEST_CASE("granularity: one schedule layer per block or per stage chunk, the same step without data parallelism") {
  struct Case {
    int tp, pp, m;
    bool sp;
    const char* schedule;
    int chunks;
    TpOverlap overlap;
    Recompute r;
  };
  const Case cases[] = {
      {2, 2, 4, false, "1f1b", 1, TpOverlap::None, Recompute::None},
      {2, 2, 4, true, "1f1b", 1, TpOverlap::Backward, Recompute::None},
      {4, 2, 4, true, "1f1b", 1, TpOverlap::Full, Recompute::Selective},
      {2, 2, 4, true, "interleaved-1f1b", 2, TpOverlap::Backward, Recompute::Full},
      {2, 2, 4, false, "zb-h1", 1, TpOverlap::Backward, Recompute::None},
  };
  for (const Case& c : cases) {
    CAPTURE(c.tp);
    CAPTURE(c.sp);
    CAPTURE(c.schedule);
    CAPTURE(tp_overlap_name(c.overlap));
    CAPTURE(recompute_name(c.r));
    const Figures fine = run(c.tp, c.pp, 1, c.m, c.sp, 0, c.schedule, c.chunks, c.overlap, c.r);
    const Figures coarse = run(c.tp, c.pp, 1, c.m, c.sp, c.pp * c.chunks, c.schedule, c.chunks, c.overlap, c.r);
    CHECK(coarse.step == doctest::Approx(fine.step).epsilon(0.005));
    CHECK(coarse.bubble == doctest::Approx(fine.bubble).epsilon(0.02));
    CHECK(coarse.exposed == doctest::Approx(fine.exposed).epsilon(0.005));
    CHECK(coarse.tp_exposed == doctest::Approx(fine.tp_exposed).epsilon(0.005));
    REQUIRE(coarse.stage_peak.size() == fine.stage_peak.size());
    for (std::size_t s = 0; s < fine.stage_peak.size(); ++s)
      CHECK(coarse.stage_peak[s] == doctest::Approx(fine.stage_peak[s]).epsilon(0.02));
  }
}

TEST_CASE("granularity: with data parallelism a coarser layer only reduces later, and holds about as much") {
  const Figures fine = run(2, 2, 2, 4, true, 0, "1f1b", 1, TpOverlap::Backward, Recompute::None);
  const Figures coarse = run(2, 2, 2, 4, true, 2, "1f1b", 1, TpOverlap::Backward, Recompute::None);
  CHECK(coarse.step >= fine.step * (1 - 1e-9));
  CHECK(coarse.step <= fine.step * 1.05);
  CHECK(coarse.tp_exposed == doctest::Approx(fine.tp_exposed).epsilon(0.005));
  for (std::size_t s = 0; s < fine.stage_peak.size(); ++s)
    CHECK(coarse.stage_peak[s] == doctest::Approx(fine.stage_peak[s]).epsilon(0.05));
}
