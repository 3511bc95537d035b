// Schedules read one rank at a time (schedules/rank_source.h): the generators' sources give the same ops as the
// schedules they generate, and the stream engine simulates a source that makes each rank's ops when asked one
// rank at a time, with the same figures, reports and errors as the schedule held whole.
#include <doctest/doctest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "hardware/model.h"
#include "hardware/device.h"
#include "hardware/network.h"
#include "schedules/generators.h"
#include "schedules/hardware_sim.h"
#include "schedules/replay.h"
#include "schedules/stream_sim.h"
#include "schedules/text_format.h"

using namespace trainsim;

namespace {

// A schedule held whole, served as a source that makes each rank's ops when asked (holds_all() false): a copy of
// the rank's list each time, into one buffer. Records which ranks were asked for, in order.
class OnDemand final : public RankSource {
 public:
  explicit OnDemand(Schedule s) : RankSource(s.header), s_(std::move(s)) {}
  const std::vector<Op>& ops(int rank) const override {
    asked.push_back(rank);
    buffer_ = s_.ranks.at(rank);
    return buffer_;
  }
  bool holds_all() const override { return false; }
  mutable std::vector<int> asked;

 private:
  Schedule s_;
  mutable std::vector<Op> buffer_;
};

GenOptions options(int stages, int microbatches) {
  GenOptions g;
  g.stages = stages, g.microbatches = microbatches;
  return g;
}

hw::HardwareSetting h100(const std::string& model) {
  hw::HardwareSetting s;
  s.model = hw::model_preset(model);
  s.device = hw::device_preset("h100-sxm");
  s.network = hw::network_preset("nvlink8-ib400");
  return s;
}

// The figures a simulation reports, for comparing two runs.
void check_same(const SimResult& a, const SimResult& b) {
  CHECK(a.ok == b.ok);
  CHECK(a.error == b.error);
  CHECK(a.op_count == b.op_count);
  CHECK(a.summary.timesteps == b.summary.timesteps);
  CHECK(a.summary.makespan == b.summary.makespan);
  CHECK(a.summary.peak.memory == b.summary.peak.memory);
  CHECK(a.summary.peak.rank == b.summary.peak.rank);
  CHECK(a.summary.peak.time == b.summary.peak.time);
  CHECK(a.summary.bubble_fraction == b.summary.bubble_fraction);
  CHECK(a.summary.timed_ops == b.summary.timed_ops);
}

}  // namespace

TEST_CASE("rank sources: every generator's source gives the ops of the schedule it generates, rank by rank") {
  struct Case {
    std::string kind;
    GenOptions o;
  };
  std::vector<Case> cases;
  for (const char* kind : {"gpipe", "1f1b", "zb-h1", "zbv", "dualpipev"}) cases.push_back({kind, options(4, 8)});
  for (const char* kind : {"interleaved-1f1b", "looped-bfs", "interleaved-zb"}) {
    GenOptions o = options(2, 4);
    o.chunks = 2;
    cases.push_back({kind, o});
  }
  for (const char* kind : {"ddp", "fsdp", "zero3-owner"}) {
    GenOptions o;
    o.dp = 3;
    cases.push_back({kind, o});
  }
  GenOptions pp = options(3, 4);
  pp.dp = 2;
  cases.push_back({"pp-fsdp", pp});
  GenOptions t3;
  t3.tp = 2, t3.pp = 2, t3.dp = 2, t3.microbatches = 3, t3.sequence_parallel = true, t3.zero = 3;
  cases.push_back({"3d", t3});
  for (const Case& c : cases) {
    CAPTURE(c.kind);
    const Schedule whole = generate(c.kind, c.o);
    const std::unique_ptr<RankSource> src = generate_ranks(c.kind, c.o);
    CHECK(src->header() == whole.header);
    CHECK(src->holds_all() == (c.kind == "ddp" || c.kind == "fsdp" || c.kind == "zero3-owner"));
    // Ranks asked for out of order, each twice: the same text as the whole schedule's.
    for (int r = src->world_size() - 1; r >= 0; --r) {
      Schedule one;
      one.header = whole.header;
      one.ranks.resize(whole.ranks.size());
      one.ranks[r] = src->ops(r);
      Schedule expect = one;
      expect.ranks[r] = whole.ranks[r];
      CHECK(print_schedule(one) == print_schedule(expect));
      CHECK(src->ops(r).size() == whole.ranks[r].size());
    }
    if (!src->holds_all()) CHECK(src->op_estimate() >= whole.op_count());
    CHECK(print_schedule(src->take()) == print_schedule(whole));
  }
}

TEST_CASE("rank sources: a source made rank by rank is simulated one rank at a time, with the held figures") {
  GenOptions o;
  o.tp = 2, o.pp = 2, o.dp = 2, o.microbatches = 4;
  const Schedule whole = generate("3d", o);
  OnDemand src(whole);
  const SimResult streamed = simulate(src);
  REQUIRE(streamed.ok);
  check_same(streamed, simulate(whole));
  CHECK(streamed.op_count == whole.op_count());
  // Each rank was asked for once, in rank order, and then once more per rank for nothing: never. (A trace would
  // ask again, to copy the ops into it; a summary-only run needs each rank's ops only while it is issued.)
  SimOptions summary_only;
  summary_only.record_trace = false;
  src.asked.clear();
  check_same(simulate(src, summary_only), simulate(whole, summary_only));
  std::vector<int> in_order(whole.header.world_size);
  for (int r = 0; r < whole.header.world_size; ++r) in_order[r] = r;
  CHECK(src.asked == in_order);
}

TEST_CASE("rank sources: the hardware report of a source made rank by rank equals the held schedule's") {
  for (bool sp : {false, true}) {
    CAPTURE(sp);
    GenOptions o;
    o.tp = 4, o.pp = 2, o.dp = 2, o.microbatches = 4, o.sequence_parallel = sp;
    std::unique_ptr<RankSource> src = generate_ranks("3d", o);
    src->header().cost_model = "hardware";
    src->header().hardware = h100("llama3-70b");
    const Schedule whole = src->take();
    src = generate_ranks("3d", o);
    src->header() = whole.header;
    REQUIRE_FALSE(src->holds_all());
    const HardwareRun held = simulate_hardware(whole);
    const HardwareRun streamed = simulate_hardware(*src, false);
    REQUIRE(held.result.ok);
    REQUIRE(streamed.result.ok);
    REQUIRE(held.report);
    REQUIRE(streamed.report);
    check_same(streamed.result, held.result);
    CHECK(streamed.result.trace.ranks[0].empty());  // no records kept
    CHECK(hw::to_json(*streamed.report).dump() == hw::to_json(*held.report).dump());
    // llama3-70b on 16 ranks does not fit an H100: the first op over its memory is the same, and it is what a run
    // with the device's memory as the limit stops at.
    REQUIRE(held.report->oom);
    CHECK(streamed.report->oom->message == held.report->oom->message);
    SimOptions limited;
    limited.memory_limit = whole.header.hardware->device.usable_memory_bytes();
    CHECK(simulate(whole, limited).error == held.report->oom->message);
    CHECK(simulate(*src, limited).error == held.report->oom->message);
  }
}

TEST_CASE("rank sources: a problem in a source made rank by rank is reported in the held schedule's words") {
  GenOptions o = options(3, 4);
  const Schedule good = generate("1f1b", o);
  std::vector<std::pair<std::string, Schedule>> bad;
  {  // a payload that is not what the recv expects
    Schedule s = good;
    for (Op& op : s.ranks[1])
      if (op.kind == OpKind::Recv) {
        op.writes.front().batches = IdSet{3};
        break;
      }
    bad.emplace_back("payload", s);
  }
  {  // a send never received: the last recv of rank 2 dropped (and what reads it: a deadlock)
    Schedule s = good;
    auto& ops = s.ranks[2];
    for (std::size_t i = ops.size(); i-- > 0;)
      if (ops[i].kind == OpKind::Recv) {
        ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    bad.emplace_back("deadlock", s);
  }
  {  // a recv from any source (matched once every send is known): valid, simulated held
    Schedule s = good;
    for (Op& op : s.ranks[1])
      if (op.kind == OpKind::Recv) op.peer = -1;
    bad.emplace_back("any source", s);
  }
  {  // an op that reads what is not resident
    Schedule s = good;
    for (Op& op : s.ranks[2])
      if (op.kind == OpKind::Forward) {
        op.reads.front().layer = 0;
        break;
      }
    bad.emplace_back("not resident", s);
  }
  {  // a group whose members are not listed in rank order (formed after issue): valid, simulated held
    Schedule s = generate("ddp", [] {
      GenOptions g;
      g.dp = 3;
      return g;
    }());
    s.header.groups.push_back({2, 0, 1});
    bad.emplace_back("unordered group", s);
  }
  for (const auto& [what, s] : bad) {
    CAPTURE(what);
    OnDemand src(s);
    const SimResult held = simulate(s);
    const SimResult streamed = simulate(src);
    CHECK(streamed.error == held.error);
    CHECK(streamed.ok == held.ok);
    CHECK(streamed.blocked.size() == held.blocked.size());
    CHECK(held.ok == (what == "any source" || what == "unordered group"));
  }
}
