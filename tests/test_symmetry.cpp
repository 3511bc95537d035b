// Symmetric simulation (schedules/symmetry.h, issue 34): one representative rank per pipeline stage, every
// collective timed for its whole group, gives the full simulation's figures to the last bit: step time, bubble,
// exposed communication, every rank's figures and peak memory with its breakdown, the out-of-memory verdict, the
// op count. Checked over a grid of 3D configurations small enough to simulate in full, on a network of 8 GPUs per
// node and one of 4 (where DP groups and pipeline messages cross nodes), and for the layouts where the ranks of a
// stage do not sit alike (no map: every rank is simulated).
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "hardware_run_helpers.h"
#include "schedules/generators/builder.h"
#include "schedules/symmetry.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::hw;

namespace {

struct Config {
  int tp, cp, dp, pp;
  const char* schedule;
  int chunks;
  int zero;
  bool sp;
  Recompute recompute;
};

// The source of `c` on a network of `gpus_per_node` GPUs per node (nvlink8-ib400's links), 16 blocks of
// Llama 3 8B at 4,096 tokens, one schedule layer per block.
std::unique_ptr<RankSource> source_of(const Config& c, int gpus_per_node) {
  GenOptions o;
  o.tp = c.tp, o.cp = c.cp, o.dp = c.dp, o.pp = c.pp, o.schedule = c.schedule, o.chunks = c.chunks, o.zero = c.zero;
  o.sequence_parallel = c.sp;
  o.microbatches = 2 * c.pp;
  ModelSpec model = model_preset("llama3-8b");
  model.blocks = 16;
  HardwareSetting hs = testing::h100_setting(model, 4096);
  hs.network.gpus_per_node = gpus_per_node;
  hs.recompute = c.recompute;
  hs.context_parallel = c.cp;
  o = per_block_layers("3d", o, hs.model.blocks);
  auto source = generate_ranks("3d", o);
  source->header().cost_model = "hardware";
  source->header().hardware = hs;
  return source;
}

std::string describe(const Config& c, int gpus_per_node) {
  return fmt::format("tp {} cp {} dp {} pp {} {} x{} zero {} sp {} recompute {} on {} GPUs per node", c.tp, c.cp, c.dp,
                     c.pp, c.schedule, c.chunks, c.zero, c.sp, static_cast<int>(c.recompute), gpus_per_node);
}

void check_same(const HardwareRun& full, const HardwareRun& sym) {
  REQUIRE(full.result.ok);
  REQUIRE(sym.result.ok);
  REQUIRE(full.report);
  REQUIRE(sym.report);
  // Every figure of the report, as gen --sim --json prints it (doubles written to round trip).
  CHECK(to_json(*full.report).dump() == to_json(*sym.report).dump());
  CHECK(full.result.summary.makespan == sym.result.summary.makespan);
  CHECK(full.result.summary.bubble_fraction == sym.result.summary.bubble_fraction);
  CHECK(full.result.summary.peak.memory == sym.result.summary.peak.memory);
  CHECK(full.result.summary.peak.rank == sym.result.summary.peak.rank);
  CHECK(full.result.summary.timed_ops == sym.result.summary.timed_ops);
  CHECK(full.result.op_count == sym.result.op_count);
  CHECK(full.result.over_capacity == sym.result.over_capacity);
  // Every rank's own figures.
  REQUIRE(full.report->ranks.size() == sym.report->ranks.size());
  for (std::size_t r = 0; r < full.report->ranks.size(); ++r) {
    const RankReport &a = full.report->ranks[r], &b = sym.report->ranks[r];
    INFO("rank " << r);
    CHECK(a.rank == b.rank);
    CHECK(a.busy_s == b.busy_s);
    CHECK(a.compute_s == b.compute_s);
    CHECK(a.comm_s == b.comm_s);
    CHECK(a.exposed_comm_s == b.exposed_comm_s);
    CHECK(a.tp_comm_exposed_s == b.tp_comm_exposed_s);
    CHECK(a.peak_memory_bytes == b.peak_memory_bytes);
    CHECK(a.peak_breakdown.total() == b.peak_breakdown.total());
    CHECK(a.peak_breakdown.time == b.peak_breakdown.time);
  }
}

}  // namespace

TEST_CASE("symmetry: one representative per stage gives the full simulation's figures to the last bit") {
  const std::vector<Config> shapes = {
      {2, 1, 2, 2, "1f1b", 1, 0, false, Recompute::None},
      {2, 1, 4, 2, "1f1b", 1, 1, true, Recompute::Selective},
      {1, 2, 2, 2, "1f1b", 1, 3, false, Recompute::None},
      {4, 1, 2, 2, "1f1b", 1, 1, true, Recompute::Full},
      {2, 2, 2, 2, "1f1b", 1, 1, true, Recompute::None},
  };
  const std::vector<std::pair<const char*, int>> schedules = {
      {"1f1b", 1}, {"interleaved-1f1b", 2}, {"zb-h1", 1}, {"zbv", 1}, {"dualpipev", 1}, {"interleaved-zb", 2}};
  int compared = 0;
  for (int gpus_per_node : {8, 4})
    for (const auto& [schedule, chunks] : schedules)
      for (Config c : shapes)
        for (int pp : {2, 4}) {
          c.schedule = schedule, c.chunks = chunks, c.pp = pp;
          INFO(describe(c, gpus_per_node));
          auto source = source_of(c, gpus_per_node);
          const std::vector<int> mirror = symmetric_mirror(source->header(), RankGrid{c.tp, c.cp, c.dp, c.pp});
          // On these layouts every class sits alike: the stage's ranks are a whole number of nodes, or within one.
          REQUIRE(mirror.size() == static_cast<std::size_t>(source->header().world_size));
          CHECK(simulated_ranks(mirror, source->header().world_size) == c.pp);
          const HardwareRun full = simulate_hardware(*source, false);
          const HardwareRun sym = simulate_hardware(*source, false, {}, mirror);
          check_same(full, sym);
          ++compared;
        }
  CHECK(compared == 2 * 6 * 5 * 2);
}

TEST_CASE("symmetry: out of memory, the same verdict, rank and message") {
  // 40 blocks of Llama 3 70B on two stages of TP 2 without ZeRO: far over 80 GB on every rank.
  GenOptions o;
  o.tp = 2, o.dp = 2, o.pp = 2, o.microbatches = 4;
  ModelSpec model = model_preset("llama3-70b");
  model.blocks = 40;
  HardwareSetting hs = testing::h100_setting(model, 4096);
  o = per_block_layers("3d", o, hs.model.blocks);
  auto source = generate_ranks("3d", o);
  source->header().cost_model = "hardware";
  source->header().hardware = hs;
  const std::vector<int> mirror = symmetric_mirror(source->header(), RankGrid{2, 1, 2, 2});
  REQUIRE(!mirror.empty());
  const HardwareRun full = simulate_hardware(*source, false);
  const HardwareRun sym = simulate_hardware(*source, false, {}, mirror);
  REQUIRE(full.report->oom);
  check_same(full, sym);
  CHECK(step_failure(full, false) == step_failure(sym, false));
}

TEST_CASE("symmetry: no map where the ranks of a stage do not sit alike, or the grid is not the schedule's") {
  // 6 GPUs per node: TP groups of 4 ranks 0-3 sit on one node, ranks 4-7 on two.
  Config c{4, 1, 2, 2, "1f1b", 1, 1, false, Recompute::None};
  auto source = source_of(c, 6);
  CHECK(symmetric_mirror(source->header(), RankGrid{4, 1, 2, 2}).empty());
  // 4 GPUs per node, TP 1, DP 3: stage 0 is ranks 0-2 (node 0), stage 1 ranks 3-5 (3 on node 0, 4 and 5 on node
  // 1): rank 0 sends to rank 3 inside node 0, rank 1 to rank 4 across nodes.
  Config d{1, 1, 3, 2, "1f1b", 1, 0, false, Recompute::None};
  auto uneven = source_of(d, 4);
  CHECK(symmetric_mirror(uneven->header(), RankGrid{1, 1, 3, 2}).empty());
  // A grid that is not the schedule's, and one without a class of more than one rank.
  CHECK(symmetric_mirror(source->header(), RankGrid{2, 1, 2, 2}).empty());
  Config e{1, 1, 1, 4, "1f1b", 1, 0, false, Recompute::None};
  auto pipeline = source_of(e, 8);
  CHECK(symmetric_mirror(pipeline->header(), RankGrid{1, 1, 1, 4}).empty());
}

TEST_CASE("symmetry: a map whose representatives are not simulated lower ranks is refused") {
  Config c{2, 1, 2, 2, "1f1b", 1, 0, false, Recompute::None};
  auto source = source_of(c, 8);
  const int world = source->header().world_size;
  std::vector<int> bad(world);
  for (int r = 0; r < world; ++r) bad[r] = r;
  bad[0] = 1;  // a representative above the rank
  CHECK_THROWS_WITH_AS(simulate_hardware(*source, false, {}, bad),
                       doctest::Contains("gives rank 0 the representative 1"), std::invalid_argument);
  bad.resize(3);
  CHECK_THROWS_AS(simulate_hardware(*source, false, {}, bad), std::invalid_argument);
}

TEST_CASE("symmetry: a message to a rank that is not simulated is an error naming it, not a hang") {
  // A map that leaves out stage 1's lowest rank: stage 0's representative sends to it.
  Config c{2, 1, 2, 2, "1f1b", 1, 0, false, Recompute::None};
  auto source = source_of(c, 8);
  const int world = source->header().world_size;  // 8: stage 0 is ranks 0-3, stage 1 ranks 4-7
  std::vector<int> mirror(world);
  for (int r = 0; r < world; ++r) mirror[r] = r < 4 ? 0 : r == 4 ? 0 : 5;
  mirror[5] = 5;
  const HardwareRun run = simulate_hardware(*source, false, {}, mirror);
  CHECK(!run.result.ok);
  CHECK(run.result.error.find("does not simulate rank 4") != std::string::npos);
}


TEST_CASE("symmetry: a pipeline's replicas made from one replica's steps are the replicas written out, op for op") {
  // The plan-wide work of gen 3d runs on one replica (PipelinePlan::replicas); every replica's ops must be what
  // the plan with all replicas' steps gives.
  struct Case {
    const char* name;
    gen::PipelinePlan order;
  };
  const Case cases[] = {{"1f1b", gen::plan_1f1b(3, 6)}, {"zb-h1", gen::plan_zb_h1(2, 5)}, {"zbv", gen::plan_zbv(2, 4)}};
  for (const Case& c : cases)
    for (gen::DpMode mode : {gen::DpMode::Replicate, gen::DpMode::Zero1, gen::DpMode::Fsdp}) {
      INFO(c.name << " dp mode " << static_cast<int>(mode));
      const gen::PipelinePlan plan = gen::replicate_pipeline(c.order, 2, 1, 3, true, mode);
      auto once = gen::build_pipeline(plan);
      auto written = gen::build_pipeline(gen::expand_replicas(plan));
      const Schedule a = once->take(), b = written->take();
      REQUIRE(a.ranks.size() == b.ranks.size());
      CHECK(a.op_count() == b.op_count());
      CHECK(print_schedule(a) == print_schedule(b));
      CHECK(once->op_estimate() == written->op_estimate());
    }
}

TEST_CASE("symmetry with expert parallelism: one rank a stage when balanced, one a slice under imbalance, exact") {
  // gen 3d --ep of a small Mixtral (4 blocks, the first dense), 2 stages of 8 DP ranks in EP groups of 4, on nodes
  // of 8 GPUs and of 4 (where EP groups sit in one node and DP groups cross nodes), balanced and with the busiest
  // slice at 1.6 times the mean, every pipeline schedule: the map's figures against every rank simulated, to the
  // last bit.
  int compared = 0;
  for (int gpus_per_node : {8, 4})
    for (double imbalance : {0.0, 1.6})
      for (const char* schedule : {"1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev", "interleaved-zb"})
        for (int zero : {0, 1}) {
          INFO(gpus_per_node << " GPUs per node, imbalance " << imbalance << ", " << schedule << ", zero " << zero);
          ModelSpec model = model_preset("mixtral-8x7b");
          model.blocks = 4, model.dense_blocks = 1;
          HardwareSetting hs = testing::h100_setting(model, 1024);
          hs.network.gpus_per_node = gpus_per_node;
          GenOptions o;
          o.dp = 8, o.pp = 2, o.ep = 4, o.zero = zero, o.schedule = schedule, o.microbatches = 4;
          o.chunks = std::string(schedule).rfind("interleaved", 0) == 0 ? 2 : 1;
          o.moe_imbalance = imbalance;
          o = per_block_layers("3d", o, hs.model.blocks);
          o = model_dense_layers("3d", o, hs.model.blocks, hs.model.dense_blocks);
          auto source = generate_ranks("3d", o);
          source->header().cost_model = "hardware";
          source->header().hardware = hs;
          const std::optional<RankGrid> grid = rank_grid("3d", o);
          REQUIRE(grid);
          const std::vector<int> mirror = symmetric_mirror(source->header(), *grid);
          REQUIRE(mirror.size() == 16u);
          CHECK(simulated_ranks(mirror, 16) == (imbalance > 0 ? 2 * 4 : 2));
          if (imbalance > 0) CHECK(mirror[8 + 6] == 8 + 2);  // stage 1, DP index 6: slice 2, as DP index 2
          const HardwareRun full = simulate_hardware(*source, false);
          const HardwareRun sym = simulate_hardware(*source, false, {}, mirror);
          check_same(full, sym);
          ++compared;
        }
  CHECK(compared == 48);
}

namespace {

// A source that counts the ranks whose ops the simulator asks for (a held fallback asks for every rank's).
class CountingSource : public RankSource {
 public:
  explicit CountingSource(std::unique_ptr<RankSource> inner) : RankSource(inner->header()), inner_(std::move(inner)) {}
  const std::vector<Op>& ops(int rank) const override {
    asked.insert(rank);
    return inner_->ops(rank);
  }
  bool holds_all() const override { return false; }
  mutable std::set<int> asked;

 private:
  std::unique_ptr<RankSource> inner_;
};

}  // namespace

TEST_CASE("symmetry with expert parallelism: the all-to-alls are checked as the ranks stream, no held fallback") {
  // Before, every all-to-all group was formed call by call after issue, which a streaming source cannot do: the
  // simulator fell back to every rank's ops held (DeepSeek-V3 on 2,048 ranks: 18 GB and 3.5 minutes). Now the
  // simulated ranks alone are asked for, and an all-to-all whose members disagree is still found, in the same words.
  ModelSpec model = model_preset("mixtral-8x7b");
  model.blocks = 4, model.dense_blocks = 1;
  HardwareSetting hs = testing::h100_setting(model, 1024);
  GenOptions o;
  o.dp = 8, o.pp = 2, o.ep = 4, o.zero = 1, o.microbatches = 4;
  o = per_block_layers("3d", o, hs.model.blocks);
  o = model_dense_layers("3d", o, hs.model.blocks, hs.model.dense_blocks);
  for (bool symmetric : {true, false}) {
    CAPTURE(symmetric);
    CountingSource source(generate_ranks("3d", o));
    source.header().cost_model = "hardware";
    source.header().hardware = hs;
    const std::vector<int> mirror = symmetric ? symmetric_mirror(source.header(), *rank_grid("3d", o)) : std::vector<int>{};
    const HardwareRun run = simulate_hardware(source, false, {}, mirror);
    INFO(run.result.error);
    REQUIRE(run.result.ok);
    CHECK(static_cast<int>(source.asked.size()) == (symmetric ? 2 : 16));
  }
  // A member that expects another slice's tokens: the held simulation's message, from a streaming source too.
  Schedule held = generate("3d", o);
  held.header.cost_model = "hardware", held.header.hardware = hs;
  bool changed = false;
  for (Op& op : held.ranks[1])
    if (!changed && op.kind == OpKind::AllToAll && !op.writes.empty() && op.writes.front().expert()) {
      op.writes.front().ep_index = 2;  // member 1 expects slice 2's tokens
      changed = true;
    }
  REQUIRE(changed);
  const HardwareRun bad = simulate_hardware(held);
  CHECK_FALSE(bad.result.ok);
  CHECK(bad.result.error.find("rank 1: forward layer 1") != std::string::npos);
  CountingSource streamed(std::make_unique<ScheduleView>(held));
  const HardwareRun again = simulate_hardware(streamed, false);
  CHECK(again.result.error == bad.result.error);
}
