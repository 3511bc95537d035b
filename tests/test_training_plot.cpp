// Issue 21, pictures of a run: --plot draws the training and validation loss and the learning rate against steps
// with labelled axes; --compare-svg lays the measured step over the hardware model's simulation of it, on one
// time scale, with the ops whose durations differ most.
#include <doctest/doctest.h>

#include <regex>

#include "cli_helpers.h"
#include "exec_helpers.h"
#include "visualize/trace_compare.h"
#include "visualize/training_plot.h"

using namespace trainsim;
using namespace trainsim::testing;

TEST_CASE("training plot: round ticks, both curves, the learning rate, units on the axes") {
  CHECK(visualize::nice_ticks(0, 1, 5) == std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1});
  CHECK(visualize::nice_ticks(4.6, 5.6, 5).size() == 6);  // step 0.2, not 0.5 (a rounding of (hi - lo) / 5)
  visualize::TrainingCurves c;
  c.title = "run";
  c.note = "model tiny; data corpus";
  for (int s = 1; s <= 10; ++s) {
    c.train_loss.push_back({static_cast<double>(s), 5.5 - 0.1 * s});
    c.learning_rate.push_back({static_cast<double>(s), 1e-3});
  }
  c.val_loss = {{5, 5.1}, {10, 4.6}};
  c.train_loss[3].value = std::numeric_limits<double>::quiet_NaN();  // a diverged value is left out, not drawn
  const std::string svg = visualize::training_plot_svg(c);
  CHECK(has(svg, "loss (cross-entropy, nats per token)"));
  CHECK(has(svg, ">learning rate<"));
  CHECK(has(svg, ">step<"));
  CHECK(has(svg, "validation loss (held-out split"));
  CHECK(std::regex_search(svg, std::regex("<circle[^>]*><title>step 10: 4.6000</title>")));
  CHECK_FALSE(has(svg, "nan"));
  CHECK(visualize::training_plot_svg(c) == svg);  // deterministic
}

TEST_CASE("replay --plot and --compare-svg") {
  auto dir = fresh_dir("training-plot");
  const std::string sched = (dir / "p.sched").string();
  REQUIRE(run_trainsim("gen 1f1b --stages 2 --microbatches 4 -o " + sched).exit_code == 0);
  CommandResult r = run_trainsim("replay " + sched + " --model tiny --steps 4 --eval-every 2 --plot " +
                                 (dir / "plot.svg").string() + " --compare-svg " + (dir / "cmp.svg").string() +
                                 " --data " + test_corpus());
  REQUIRE(r.exit_code == 0);
  const std::string plot = slurp(dir / "plot.svg");
  CHECK(has(plot, "4 steps on 2 ranks"));
  CHECK(has(plot, "<title>step 4: "));  // the last evaluation's point
  const std::string cmp = slurp(dir / "cmp.svg");
  CHECK(has(cmp, "measured on the cpu backend"));
  CHECK(has(cmp, "simulated: the hardware cost model, device cpu"));
  CHECK(has(cmp, "ops whose durations differ most"));
  CHECK(std::regex_search(cmp, std::regex("step time: measured [0-9.]+ (s|ms|µs), simulated [0-9.]+ (s|ms|µs)")));
  // The report lays the prediction next to what it measured.
  CHECK(has(r.out, "predicted by the hardware cost model"));
  CHECK(std::regex_search(r.out, std::regex("\n  rank   0  predicted [0-9.]+ MiB  measured [0-9.]+ MiB \\([-+][0-9.]+ %\\)")));
}

TEST_CASE("trace comparison: ops matched by description and source line, largest differences first") {
  Trace m, s;
  m.world_size = s.world_size = 1;
  m.ranks.resize(1), s.ranks.resize(1);
  Op f;
  f.kind = OpKind::Forward, f.layer = 0, f.batches = IdSet{0}, f.where = "p.sched:3";
  Op b = f;
  b.kind = OpKind::Backward, b.where = "p.sched:4";
  m.ranks[0] = {OpRun{f, 0, 1000, 0}, OpRun{b, 1000, 5000, 0}};
  s.ranks[0] = {OpRun{f, 0, 3000, 0}, OpRun{b, 3000, 4000, 0}};
  const auto d = visualize::largest_op_differences(m, s, 10);
  REQUIRE(d.size() == 2);
  CHECK(d[0].op == "backward layer 0 batches {0} (p.sched:4)");
  CHECK(d[0].difference_s() == doctest::Approx(3e-6));
  CHECK(d[1].difference_s() == doctest::Approx(-2e-6));
  CHECK(visualize::largest_op_differences(m, s, 1).size() == 1);
}
