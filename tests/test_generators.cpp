// Schedule generators (schedules/generators.h) and `trainsim gen`: every generated schedule simulates
// cleanly and round-trips through the text format; pipeline bubbles match their closed forms; in-flight
// microbatches match each schedule's memory bound; ZeRO stages save memory in order.
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "schedules/generators.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

const std::vector<std::string> kPipelineKinds = {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zbv",
                                                  "dualpipev", "interleaved-zb"};
const std::vector<std::string> kDataParallelKinds = {"ddp", "zero1", "zero2", "fsdp"};

bool uses_chunks(const std::string& kind) {
  return kind == "interleaved-1f1b" || kind == "looped-bfs" || kind == "interleaved-zb";
}

std::string label(const std::string& kind, const GenOptions& o) {
  return kind + " stages=" + std::to_string(o.stages) + " microbatches=" + std::to_string(o.microbatches) +
         " chunks=" + std::to_string(o.chunks) + " layers=" + std::to_string(o.layers) + " dp=" + std::to_string(o.dp) +
         " prefetch=" + std::to_string(o.prefetch) + " reshard=" + std::to_string(o.reshard_after_forward);
}

// Simulates `s` and checks that it is valid and that print -> parse -> print gives the same bytes.
SimResult check_schedule(const Schedule& s, const std::string& what) {
  INFO(what);
  SimResult r = simulate(s);
  INFO(r.error);
  CHECK(r.ok);
  std::string text = print_schedule(s);
  std::string again;
  try {
    again = print_schedule(parse_schedule(text, "generated.sched"));
  } catch (const ParseError& e) {
    FAIL_CHECK("the printed schedule does not parse: " << e.what());
  }
  CHECK(again == text);
  return r;
}

// Peak, per rank over its op order, of the microbatches whose forward is done and whose closing pass
// (backward or backward-input, or backward-weight) is not.
std::vector<int> peak_in_flight(const Schedule& s, bool until_weight_grad = false) {
  std::vector<int> peaks;
  for (const auto& ops : s.ranks) {
    int now = 0, peak = 0;
    for (const Op& op : ops) {
      if (op.kind == OpKind::Forward) peak = std::max(peak, ++now);
      bool closes = op.kind == OpKind::Backward ||
                    (until_weight_grad ? op.kind == OpKind::BackwardWeight : op.kind == OpKind::BackwardInput);
      if (closes) --now;
    }
    CHECK(now == 0);
    peaks.push_back(peak);
  }
  return peaks;
}

// The exception message of generate(kind, o), or "" when it does not throw std::invalid_argument.
std::string rejection(const std::string& kind, const GenOptions& o) {
  try {
    generate(kind, o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

double closed_form(int p, int m, int v) { return static_cast<double>(p - 1) / (v * m + p - 1); }

}  // namespace

TEST_CASE("gen: the registry lists every kind and rejects unknown ones") {
  std::vector<std::string> want = kPipelineKinds;
  want.insert(want.end(), kDataParallelKinds.begin(), kDataParallelKinds.end());
  want.push_back("pp-fsdp");
  want.push_back("zero3-owner");
  want.push_back("tp");
  want.push_back("3d");
  want.push_back("ep");
  auto kinds = generator_kinds();
  std::sort(want.begin(), want.end());
  std::sort(kinds.begin(), kinds.end());
  CHECK(kinds == want);
  std::string e = rejection("pipedream-2bw", GenOptions{});
  CHECK(e.find("pipedream-2bw") != std::string::npos);
  CHECK(e.find("1f1b") != std::string::npos);
}

TEST_CASE("gen: pipeline kinds validate, round-trip and match their bubble over stages 1-8, microbatches 1-16") {
  int generated = 0;
  std::vector<int> refused_at_4;  // interleaved-1f1b's refused microbatch counts for 4 stages (each chunk count)
  for (const std::string& kind : kPipelineKinds)
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 16; ++m)
        for (int v = 1; v <= (uses_chunks(kind) ? 4 : 1); ++v) {
          GenOptions o;
          o.stages = p;
          o.microbatches = m;
          o.chunks = v;
          std::string what = label(kind, o);
          INFO(what);
          // PyTorch's ScheduleInterleaved1F1B: rounds = max(1, m / p) rounds of equal size.
          if (((kind == "interleaved-1f1b" && v > 1) || kind == "interleaved-zb") && m % std::max(1, m / p) != 0) {
            std::string e = rejection(kind, o);
            CHECK(e.find("rounds") != std::string::npos);
            if (p == 4 && kind == "interleaved-1f1b") refused_at_4.push_back(m);
            continue;
          }
          if (kind == "dualpipev" && m < 2 * p) {  // PyTorch's ScheduleDualPipeV: at least as many as the stages
            CHECK(rejection(kind, o).find("at least the number of stages") != std::string::npos);
            continue;
          }
          Schedule s = generate(kind, o);
          ++generated;
          const int layers = uses_chunks(kind) ? p * v : kind == "zbv" || kind == "dualpipev" ? 2 * p : p;
          CHECK(s.header.world_size == p);
          CHECK(s.header.layers == layers);
          CHECK(s.header.microbatches == m);
          CHECK(s.header.cost_model == "unit");
          CHECK(s.header.p2p == P2PMode::PerPairChannel);
          REQUIRE(s.header.stage_map.size() == static_cast<std::size_t>(layers));
          for (int r = 0; r < p; ++r)
            for (const Op& op : s.ranks[r])
              if (is_compute(op.kind) && op.kind != OpKind::Loss) CHECK(s.header.stage_map[op.layer] == r);
          SimResult r = check_schedule(s, what);
          if (!r.ok) continue;
          double bubble = r.trace.bubble_fraction();
          if (kind == "gpipe" || kind == "1f1b") CHECK(bubble == doctest::Approx(closed_form(p, m, 1)));
          // Interleaving fills the pipeline once there are at least p microbatches (any count PyTorch accepts);
          // with fewer, each chunk's microbatches pass through before the next chunk's, as breadth-first does.
          if (kind == "interleaved-1f1b" && m >= p) CHECK(bubble == doctest::Approx(closed_form(p, m, v)));
          if (kind == "interleaved-1f1b" && m < p)
            CHECK(bubble == doctest::Approx(simulate(generate("looped-bfs", o)).summary.bubble_fraction));
          // ZBV fills the bubbles of interleaving its two chunks with deferred weight passes: no bubble on one
          // rank, and less than interleaved 1F1B's (p-1)/(2m+p-1) over the same 2p stages otherwise.
          if (kind == "zbv" && p == 1) CHECK(bubble == doctest::Approx(0.0));
          if (kind == "zbv" && p > 1 && m >= p) CHECK(bubble < closed_form(p, m, 2));
          // Interleaved zero bubble: the bubble of zb-h1, (p-1)(F+I-W) = p-1 with unit costs, over v times the work.
          if (kind == "interleaved-zb" && m >= p)
            CHECK(bubble == doctest::Approx(static_cast<double>(p - 1) / (2.0 * m * v + p - 1)));
          // DualPipeV's overlapped pairs and late split backwards leave no more bubble than ZBV's, same sizes.
          if (kind == "dualpipev") CHECK(bubble <= simulate(generate("zbv", o)).summary.bubble_fraction + 1e-12);
          // Breadth-first keeps every stage busy between its chunks once there are at least p microbatches.
          if (kind == "looped-bfs" && m >= p) CHECK(bubble == doctest::Approx(closed_form(p, m, v)));
        }
  // 9 = 2 rounds of 4.5, 11 = 2 of 5.5, 13 = 3 of 4.33, 14 = 3 of 4.67; every other count up to 16 splits.
  CHECK(refused_at_4 == std::vector<int>{9, 9, 9, 11, 11, 11, 13, 13, 13, 14, 14, 14});
  CHECK(generated > 8 * 16 * 7);
}

TEST_CASE("gen: zb-h1's bubble is below 1f1b's and matches (p-1)(F+B-W) once m >= p") {
  for (int p = 2; p <= 8; ++p)
    for (int m = p; m <= 16; ++m) {
      GenOptions o;
      o.stages = p;
      o.microbatches = m;
      INFO(label("zb-h1", o));
      SimResult zb = simulate(generate("zb-h1", o));
      SimResult ofob = simulate(generate("1f1b", o));
      REQUIRE(zb.ok);
      REQUIRE(ofob.ok);
      CHECK(zb.trace.bubble_fraction() < ofob.trace.bubble_fraction() - 1e-9);
      CHECK(zb.trace.makespan() < ofob.trace.makespan());
      // Qi et al.: ZB-H1's bubble per stage is (p-1)(T_F + T_B - T_W); unit costs F = 1, B (input) = W = 0.5.
      CHECK(zb.trace.bubble_fraction() == doctest::Approx(static_cast<double>(p - 1) / (2 * m + p - 1)));
    }
}

TEST_CASE("gen: in-flight microbatches per stage: m for gpipe, min(m, p - stage) for 1f1b and zb-h1") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      GenOptions o;
      o.stages = p;
      o.microbatches = m;
      INFO("stages=" << p << " microbatches=" << m);
      auto gpipe = peak_in_flight(generate("gpipe", o));
      auto ofob = peak_in_flight(generate("1f1b", o));
      Schedule zb = generate("zb-h1", o);
      auto zb_input = peak_in_flight(zb);
      auto zb_weight = peak_in_flight(zb, true);
      for (int s = 0; s < p; ++s) {
        INFO("stage " << s);
        CHECK(gpipe[s] == m);
        CHECK(ofob[s] == std::min(m, p - s));
        CHECK(zb_input[s] == std::min(m, p - s));
        // Deferred weight passes keep activations longer, but never beyond 1F1B's first stage's p.
        CHECK(zb_weight[s] <= std::min(m, p));
      }
    }
}

TEST_CASE("gen: zb-h1 splits every backward into backward-input and backward-weight") {
  GenOptions o;
  o.stages = 4;
  o.microbatches = 8;
  Schedule s = generate("zb-h1", o);
  for (const auto& ops : s.ranks) {
    int inputs = 0, weights = 0, full = 0;
    for (const Op& op : ops) {
      inputs += op.kind == OpKind::BackwardInput;
      weights += op.kind == OpKind::BackwardWeight;
      full += op.kind == OpKind::Backward;
    }
    CHECK(inputs == 8);
    CHECK(weights == 8);
    CHECK(full == 0);
  }
}

TEST_CASE("gen: pp-fsdp validates and keeps 1f1b's bubble over stages, microbatches and replicas") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; m += (m < 4 ? 1 : 3))
      for (int dp = 1; dp <= 3; ++dp) {
        GenOptions o;
        o.stages = p;
        o.microbatches = m;
        o.dp = dp;
        std::string what = label("pp-fsdp", o);
        INFO(what);
        Schedule s = generate("pp-fsdp", o);
        CHECK(s.header.world_size == p * dp);
        CHECK(s.header.microbatches == m * dp);
        REQUIRE(s.header.groups.size() == static_cast<std::size_t>(p));
        for (int st = 0; st < p; ++st)
          for (int j = 0; j < dp; ++j) CHECK(s.header.groups[st][j] == j * p + st);
        for (int r = 0; r < p * dp; ++r)
          for (const Op& op : s.ranks[r])
            if (op.kind == OpKind::Forward) CHECK(s.header.stage_map[op.layer] == r % p);
        SimResult r = check_schedule(s, what);
        if (r.ok) CHECK(r.trace.bubble_fraction() == doctest::Approx(closed_form(p, m, 1)));
      }
}

TEST_CASE("gen: data-parallel kinds validate and round-trip for dp 1-8") {
  for (const std::string& kind : kDataParallelKinds)
    for (int dp = 1; dp <= 8; ++dp)
      for (int m = 1; m <= 3; ++m)
        for (int layers : {0, 1, 3})
          for (int prefetch = 0; prefetch <= (kind == "fsdp" ? 2 : 0); ++prefetch)
            for (bool reshard : {true, false}) {
              if (!reshard && kind != "fsdp") continue;
              GenOptions o;
              o.dp = dp;
              o.microbatches = m;
              o.layers = layers;
              o.prefetch = prefetch;
              o.reshard_after_forward = reshard;
              std::string what = label(kind, o);
              Schedule s = generate(kind, o);
              CHECK(s.header.world_size == dp);
              CHECK(s.header.layers == (layers == 0 ? 4 : layers));
              CHECK(s.header.microbatches == dp * m);
              SimResult r = check_schedule(s, what);
              if (r.ok) CHECK(r.trace.bubble_fraction() == doctest::Approx(0.0));
            }
}

TEST_CASE("gen: peak memory decreases ddp > zero1 > zero2 > fsdp for dp 4") {
  for (int m : {1, 2, 8}) {
    GenOptions o;
    o.dp = 4;
    o.microbatches = m;
    std::vector<double> peaks;
    for (const std::string& kind : kDataParallelKinds) {
      SimResult r = simulate(generate(kind, o));
      INFO(kind << " microbatches=" << m << ": " << r.error);
      REQUIRE(r.ok);
      peaks.push_back(r.trace.peak().memory);
    }
    INFO("microbatches=" << m << " peaks ddp " << peaks[0] << " zero1 " << peaks[1] << " zero2 " << peaks[2]
                         << " fsdp " << peaks[3]);
    CHECK(peaks[0] > peaks[1]);
    CHECK(peaks[1] > peaks[2]);
    CHECK(peaks[2] > peaks[3]);
  }
}

TEST_CASE("gen: fsdp's gathered weights follow prefetch and reshard_after_forward") {
  GenOptions o;
  o.dp = 4;
  o.microbatches = 2;
  o.layers = 6;
  auto peak = [&](int prefetch, bool reshard) {
    GenOptions q = o;
    q.prefetch = prefetch;
    q.reshard_after_forward = reshard;
    Schedule s = generate("fsdp", q);
    // Most complete weights any rank holds at once, counted over its op order.
    int most = 0, now = 0, gathers = 0;
    for (const Op& op : s.ranks[0]) {
      if (op.kind == OpKind::AllGather && op.writes.front().step == 0) ++now, ++gathers;
      if (op.kind == OpKind::Free)
        for (const Tensor& t : op.reads)
          if (t.kind == TensorKind::Weight && t.step == 0 && t.complete()) --now;
      most = std::max(most, now);
    }
    CHECK(now == 0);
    // Gathered for every forward and, when resharded, again for every backward but the last layer's (kept from
    // its forward to its backward, as torchtitan does).
    CHECK(gathers == o.microbatches * (reshard ? 2 * o.layers - 1 : o.layers));
    SimResult r = simulate(s);
    INFO(r.error);
    CHECK(r.ok);
    return std::pair<int, double>{most, r.trace.peak().memory};
  };
  // In program order the most gathered weights are in the forward: with prefetch k >= 1 the all-gather of
  // layer l is issued after the forward of l - k - 2, so a forward of layer l follows the all-gathers up to
  // layer l + k + 1 (k + 2 weights); with prefetch 0 only its own (docs/design.md, "Overlap").
  CHECK(peak(0, true).first == 1);
  CHECK(peak(1, true).first == 1 + 2);
  CHECK(peak(2, true).first == 2 + 2);
  CHECK(peak(1, false).first == 6);
  CHECK(peak(0, true).second < peak(2, true).second);
  CHECK(peak(1, true).second < peak(1, false).second);
}

TEST_CASE("gen: rejected options name the option") {
  auto with = [](auto set) {
    GenOptions o;
    set(o);
    return o;
  };
  for (const std::string& kind : kPipelineKinds) {
    INFO(kind);
    CHECK(rejection(kind, with([](GenOptions& o) { o.stages = 0; })).find("--stages") != std::string::npos);
    CHECK(rejection(kind, with([](GenOptions& o) { o.microbatches = 0; })).find("--microbatches") != std::string::npos);
    if (uses_chunks(kind))
      CHECK(rejection(kind, with([](GenOptions& o) { o.chunks = 0; })).find("--chunks") != std::string::npos);
  }
  for (const std::string& kind : kDataParallelKinds) {
    INFO(kind);
    CHECK(rejection(kind, with([](GenOptions& o) { o.dp = 0; })).find("--dp") != std::string::npos);
    CHECK(rejection(kind, with([](GenOptions& o) { o.microbatches = -1; })).find("--microbatches") != std::string::npos);
    CHECK(rejection(kind, with([](GenOptions& o) { o.layers = -2; })).find("--layers") != std::string::npos);
  }
  CHECK(rejection("fsdp", with([](GenOptions& o) { o.prefetch = -1; })).find("--prefetch") != std::string::npos);
  CHECK(rejection("pp-fsdp", with([](GenOptions& o) { o.dp = 0; })).find("--dp") != std::string::npos);
  CHECK(rejection("pp-fsdp", with([](GenOptions& o) { o.stages = 0; })).find("--stages") != std::string::npos);
}

TEST_CASE("gen: trainsim gen writes a schedule file that parses and simulates") {
  auto dir = fresh_dir("gen-cli");
  auto file = dir / "1f1b.sched";
  CommandResult r = run_trainsim("gen 1f1b --stages 4 --microbatches 8 -o " + file.string(), true);
  INFO(r.out);
  CHECK(r.exit_code == 0);
  std::string text = slurp(file);
  Schedule s = parse_schedule(text, file.string());
  CHECK(s.header.world_size == 4);
  CHECK(s.header.microbatches == 8);
  GenOptions o;
  o.stages = 4;
  o.microbatches = 8;
  CHECK(text == print_schedule(generate("1f1b", o)));
  SimResult sim = simulate(s);
  INFO(sim.error);
  CHECK(sim.ok);

  CommandResult out = run_trainsim("gen fsdp --dp 2 --layers 2 --microbatches 1 --prefetch 0 --no-reshard-after-forward -o -");
  CHECK(out.exit_code == 0);
  GenOptions f;
  f.dp = 2;
  f.layers = 2;
  f.microbatches = 1;
  f.prefetch = 0;
  f.reshard_after_forward = false;
  CHECK(out.out == print_schedule(generate("fsdp", f)));
}

TEST_CASE("interleaved_rounds_fit says which microbatch counts the interleaved generators take") {
  // The planner removes the counts it refuses before generating (plan/search.cpp): it must agree with the
  // generators themselves on every small shape.
  for (const char* schedule : {"interleaved-1f1b", "interleaved-zb", "1f1b"})
    for (int p = 1; p <= 5; ++p)
      for (int m = 1; m <= 16; ++m) {
        CAPTURE(schedule);
        CAPTURE(p);
        CAPTURE(m);
        GenOptions o;
        o.stages = p, o.microbatches = m, o.chunks = std::string(schedule) == "1f1b" ? 1 : 2;
        bool generated = true;
        try {
          generate(schedule, o);
        } catch (const std::invalid_argument&) {
          generated = false;
        }
        CHECK(interleaved_rounds_fit(schedule, p, m) == generated);
      }
}

TEST_CASE("gen: trainsim gen reports bad kinds and options with exit code 2") {
  CommandResult unknown = run_trainsim("gen nonsense -o -", true);
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.out.find("unknown kind 'nonsense'") != std::string::npos);
  CHECK(unknown.out.find("interleaved-1f1b") != std::string::npos);

  CommandResult bad = run_trainsim("gen interleaved-1f1b --stages 4 --microbatches 9 --chunks 2 -o -", true);
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.find("9 microbatches do not split into 2 rounds") != std::string::npos);

  CommandResult zero = run_trainsim("gen ddp --dp 0 -o -", true);
  CHECK(zero.exit_code == 2);
  CHECK(zero.out.find("--dp") != std::string::npos);

  CommandResult help = run_trainsim("gen --help", true);
  CHECK(help.exit_code == 0);
  for (const auto& kind : generator_kinds()) CHECK(help.out.find(kind) != std::string::npos);
}

namespace {

// Every pass of one microbatch through one layer the same length (forward = backward-input = backward-weight =
// 1 s; a full backward 2 s), nothing else: the costs the zero-bubble papers state their bubbles for.
class EqualPassCost final : public CostModel {
 public:
  std::string name() const override { return "equal-passes"; }
  Time duration(const Op& op, int) const override {
    const int n = op.batches.size();
    switch (op.kind) {
      case OpKind::Forward:
      case OpKind::BackwardInput:
      case OpKind::BackwardWeight: return n * kTicksPerSecond;
      case OpKind::Backward: return 2 * n * kTicksPerSecond;
      default: return 0;
    }
  }
  double memory(const Tensor&) const override { return 1; }
  std::string memory_unit() const override { return "tensors"; }
};

}  // namespace

TEST_CASE("gen: with forward = backward-input = backward-weight, ZBV and DualPipeV reach the lower bound") {
  EqualPassCost equal;
  SimOptions options;
  options.cost = &equal;
  for (int p = 1; p <= 6; ++p)
    for (int m : {2 * p, 2 * p + 1, 3 * p, 16}) {
      CAPTURE(p);
      CAPTURE(m);
      GenOptions o;
      o.stages = p, o.microbatches = m;
      // A lower bound for any schedule of this placement: rank p-1 holds stages p-1 and p, so it cannot start
      // before microbatch 0's forward has crossed p-1 ranks (p-1 seconds), and then has 2m each of F, I and W
      // to run, one second each. With equal passes both schedules meet it: their only idle time is the fill.
      const double bound = (p - 1) + 6.0 * m;
      for (const char* kind : {"zbv", "dualpipev"}) {
        CAPTURE(kind);
        SimResult r = simulate(generate(kind, o), options);
        REQUIRE(r.ok);
        CHECK(to_seconds(r.summary.makespan) == doctest::Approx(bound));
      }
    }
}

TEST_CASE("gen: the unit model charges a layer by its share of the model, so chunks cost 1/v of a stage") {
  // Issue 18: interleaved 1F1B with 2 chunks looked slower than 1F1B, each chunk costing a whole stage.
  // Every pipeline kind holds the same model on p ranks: each rank computes 1/p of it for every microbatch,
  // forward plus backward 2 s per microbatch whatever its layers (stages, chunks, V halves, split backwards).
  for (const std::string& kind : kPipelineKinds)
    for (int p : {1, 2, 3, 4})
      for (int m : {4, 8, 12})
        for (int v = 1; v <= (uses_chunks(kind) ? 3 : 1); ++v) {
          GenOptions o;
          o.stages = p, o.microbatches = m, o.chunks = v;
          if (kind == "dualpipev" && m < 2 * p) continue;
          if ((kind == "interleaved-1f1b" || kind == "interleaved-zb") && m % std::max(1, m / p) != 0) continue;
          INFO(label(kind, o));
          SimResult r = simulate(generate(kind, o));
          REQUIRE(r.ok);
          for (const auto& ops : r.trace.ranks) {
            Time busy = 0;
            for (const OpRun& run : ops)
              if (is_compute(run.op.kind)) busy += run.end - run.start;
            CHECK(to_seconds(busy) == doctest::Approx(2.0 * m).epsilon(1e-8));  // v = 3: thirds round to 1 ns
          }
        }
  // Interleaved 1F1B against 1F1B, m >= p: the same work (2m s a rank) with the bubble (p-1)/(vm+p-1): the
  // fill and drain shrink by v, makespan 2(m + (p-1)/v) against 2(m + p - 1).
  for (int p = 2; p <= 6; ++p)
    for (int m : {p, 2 * p, 3 * p})
      for (int v = 1; v <= 4; ++v) {
        GenOptions o;
        o.stages = p, o.microbatches = m, o.chunks = v;
        INFO(label("interleaved-1f1b", o));
        SimResult one = simulate(generate("1f1b", o)), inter = simulate(generate("interleaved-1f1b", o));
        REQUIRE(one.ok);
        REQUIRE(inter.ok);
        CHECK(to_seconds(one.summary.makespan) == doctest::Approx(2.0 * (m + p - 1)));
        CHECK(to_seconds(inter.summary.makespan) == doctest::Approx(2.0 * (m + (p - 1.0) / v)));
        CHECK(inter.summary.bubble_fraction == doctest::Approx(closed_form(p, m, v)));
        if (v > 1) CHECK(inter.summary.makespan < one.summary.makespan);
      }
  // A schedule without a stage map (data parallel) keeps one second per batch and layer; so does a
  // hand-built unit model.
  GenOptions o;
  o.dp = 2, o.layers = 4, o.microbatches = 4;
  SimResult ddp = simulate(generate("ddp", o));
  REQUIRE(ddp.ok);
  for (const OpRun& run : ddp.trace.ranks[0])
    if (run.op.kind == OpKind::Forward) CHECK(run.end - run.start == kTicksPerSecond * run.op.batches.size());
  CHECK(UnitCostModel().per_batch() == kTicksPerSecond);
  CHECK(UnitCostModel(4, 8).per_batch() == kTicksPerSecond / 2);
  CHECK(UnitCostModel(1, 3).per_batch() == 333'333'333);
  CHECK_THROWS_AS(UnitCostModel(3, 2), std::invalid_argument);
  CHECK_THROWS_AS(UnitCostModel(0, 2), std::invalid_argument);
}
