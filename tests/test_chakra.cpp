// Issue 36: Chakra execution traces out and back in (interop/chakra.h, docs/chakra.md).
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>

#include <google/protobuf/util/delimited_message_util.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "hardware/cost_model.h"
#include "interop/chakra.h"
#include "schedules/cost_models.h"
#include "schedules/generators.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::testing;
using ChakraProtoMsg::Node;

namespace {

// A small schedule of every generator kind.
Schedule small(const std::string& kind) {
  GenOptions o;
  o.stages = 2, o.microbatches = 4, o.dp = 2, o.layers = 2;
  if (kind == "interleaved-1f1b" || kind == "looped-bfs" || kind == "interleaved-zb") o.chunks = 2;
  if (kind == "tp") o.tp = 2, o.dp = 1;
  if (kind == "3d") o.tp = 2, o.pp = 2, o.dp = 2, o.stages = 2;
  if (kind == "pp-fsdp" || kind == "3d") o.microbatches = 2;
  if (kind == "dualpipev") o.microbatches = 4;
  return generate(kind, o);
}

const ChakraProtoMsg::AttributeProto* attr(const Node& n, const std::string& name) {
  for (const auto& a : n.attr())
    if (a.name() == name) return &a;
  return nullptr;
}

// Every rank's file written and parsed back.
std::vector<ChakraRank> written_and_read(const std::vector<ChakraRank>& trace) {
  std::vector<ChakraRank> back;
  for (std::size_t r = 0; r < trace.size(); ++r)
    back.push_back(parse_chakra_file(chakra_file_bytes(trace[r]), "rank" + std::to_string(r), 1 << 22));
  return back;
}

std::vector<std::string> names_of(std::size_t n) {
  std::vector<std::string> names;
  for (std::size_t r = 0; r < n; ++r) names.push_back("t." + std::to_string(r) + ".et");
  return names;
}

}  // namespace

TEST_CASE("chakra: every generator kind goes out and comes back the same schedule, nodes and dependencies") {
  for (const std::string& kind : generator_kinds()) {
    CAPTURE(kind);
    const Schedule s = small(kind);
    const std::vector<ChakraRank> trace = chakra_trace(s);
    REQUIRE(trace.size() == static_cast<std::size_t>(s.header.world_size));
    const std::vector<ChakraRank> back = written_and_read(trace);
    for (std::size_t r = 0; r < trace.size(); ++r) {
      CHECK(back[r].metadata.version() == kChakraSchemaVersion);
      REQUIRE(back[r].nodes.size() == s.ranks[r].size());
      std::set<std::uint64_t> ids;
      for (std::size_t i = 0; i < back[r].nodes.size(); ++i) {
        const Node& n = back[r].nodes[i];
        CHECK(n.SerializeAsString() == trace[r].nodes[i].SerializeAsString());  // the same node read back
        CHECK(ids.insert(n.id()).second);                                          // ids unique per rank
        for (std::uint64_t d : n.data_deps()) CHECK(d < n.id());                   // dependencies point back
        for (std::uint64_t d : n.ctrl_deps()) CHECK(d < n.id());
      }
    }
    const Schedule again = schedule_from_chakra(back, names_of(back.size()));
    CHECK(print_schedule(again) == print_schedule(s));
    CHECK(again.ranks[0].front().where == "t.0.et node 0");
  }
}

TEST_CASE("chakra: messages pair up and every collective's members agree on type, size and group") {
  for (const char* kind : {"1f1b", "fsdp", "zero3-owner", "3d", "dualpipev"}) {
    CAPTURE(kind);
    Schedule s = small(kind);
    const std::vector<ChakraRank> trace = chakra_trace(s);
    // (src, dst, tag) -> size, from the sends and from the receives.
    std::map<std::tuple<long long, long long, long long>, long long> sends, recvs;
    // (group, k-th collective of the group on the rank) -> (type, size) of every member.
    std::map<std::pair<std::string, int>, std::set<std::pair<long long, long long>>> colls;
    std::map<std::pair<std::string, int>, int> members;
    for (std::size_t r = 0; r < trace.size(); ++r) {
      std::map<std::string, int> count;
      for (const Node& n : trace[r].nodes) {
        if (n.type() == ChakraProtoMsg::COMM_SEND_NODE || n.type() == ChakraProtoMsg::COMM_RECV_NODE) {
          auto key = std::make_tuple(static_cast<long long>(attr(n, "comm_src")->int32_val()),
                                     static_cast<long long>(attr(n, "comm_dst")->int32_val()),
                                     static_cast<long long>(attr(n, "comm_tag")->int32_val()));
          auto& side = n.type() == ChakraProtoMsg::COMM_SEND_NODE ? sends : recvs;
          CHECK(side.emplace(key, attr(n, "comm_size")->int64_val()).second);  // (one message per tag)
        }
        if (n.type() == ChakraProtoMsg::COMM_COLL_NODE) {
          const std::string g = attr(n, "pg_name")->string_val();
          const std::pair<std::string, int> key{g, count[g]++};
          colls[key].insert({attr(n, "comm_type")->int64_val(), attr(n, "comm_size")->int64_val()});
          ++members[key];
        }
      }
    }
    CHECK(sends == recvs);
    for (const auto& [key, seen] : colls) {
      CAPTURE(key.first);
      CHECK(seen.size() == 1);
      const int g = std::stoi(key.first);
      const std::size_t size = g == 0 ? s.header.world_size : s.header.groups[g - 1].size();
      CHECK(members[key] == static_cast<int>(size));
    }
    const nlohmann::json groups = nlohmann::json::parse(chakra_comm_groups_json(s.header));
    CHECK(groups.size() == s.header.groups.size() + 1);
  }
}

TEST_CASE("chakra: with the hardware cost model, durations, FLOPs and bytes are the model's") {
  auto dir = fresh_dir("chakra-hw");
  const std::string sched = (dir / "hw.sched").string();
  REQUIRE(run_trainsim("gen 3d --tp 2 --pp 2 --microbatches 2 --model llama3-8b --seq 8192 -o " + sched).exit_code == 0);
  const Schedule s = read_schedule_file(sched);
  const std::vector<ChakraRank> trace = chakra_trace(s);
  // A Llama 3 8B block's forward on a TP rank of 2 over 8192 tokens, written out: 2 FLOPs per parameter and token
  // (q, o 4096 x 4096; k, v 4096 x 1024; gate, up, down 4096 x 14336) plus the attention core 4 s d per token
  // (unmasked), both split over the 2 ranks.
  const double block = 2.0 * 4096 * 4096 + 2.0 * 4096 * 1024 + 3.0 * 4096 * 14336, T = 8192;
  const double forward = (2 * block * T + 4 * T * 4096 * T) / 2;
  int forwards = 0;
  std::uint64_t last_end = 0;
  for (const ChakraRank& rank : trace)
    for (const Node& n : rank.nodes) {
      last_end = std::max<std::uint64_t>(last_end, n.start_time_micros() + n.duration_micros());
      const std::string op = attr(n, "trainsim_op")->string_val();
      if (op.rfind("forward L", 0) == 0 && op.rfind("forward L0 ", 0) != 0 && op.find("L31") == std::string::npos) {
        CHECK(static_cast<double>(attr(n, "num_ops")->int64_val()) == doctest::Approx(forward).epsilon(0.001));
        CHECK(n.duration_micros() > 0);
        ++forwards;
      }
      // The TP all-reduce of a block's output: one microbatch of 8192 tokens x 4096 in bf16.
      if (op.rfind("all-reduce", 0) == 0 && op.find("A") != std::string::npos && op.find("dW") == std::string::npos)
        CHECK(attr(n, "comm_size")->int64_val() == 8192LL * 4096 * 2);
      if (op.rfind("free", 0) == 0) CHECK(attr(n, "tensor_size")->uint64_val() == 0);
    }
  CHECK(forwards > 0);
  // The last node ends when `trainsim sim` says the step ends (to the microsecond of rounding per op).
  const CommandResult sim = run_trainsim("sim " + sched + " --json");
  REQUIRE(sim.exit_code == 0);
  const double makespan = nlohmann::json::parse(sim.out)["makespan"].get<double>();
  CHECK(static_cast<double>(last_end) == doctest::Approx(makespan * 1e6).epsilon(0.001));
}

TEST_CASE("chakra: hostile or foreign traces are refused naming the file, the node and its type") {
  const Schedule s = small("1f1b");
  std::vector<ChakraRank> trace = chakra_trace(s);
  const std::vector<std::string> names = names_of(trace.size());
  auto refused = [&](const std::vector<ChakraRank>& t) -> std::string {
    try {
      schedule_from_chakra(t, names);
    } catch (const ChakraError& e) {
      return e.what();
    }
    return "";
  };
  {  // a node another tool wrote: no trainsim_op
    auto t = trace;
    Node& n = t[1].nodes[3];
    n.set_name("aten::mm");
    n.clear_attr();
    const std::string why = refused(t);
    CHECK(why.find("t.1.et: node 3 'aten::mm' (COMP_NODE)") != std::string::npos);
    CHECK(why.find("no trainsim_op") != std::string::npos);
  }
  {  // a long name is quoted short
    auto t = trace;
    t[1].nodes[3].set_name(std::string(10000, 'x'));
    t[1].nodes[3].clear_attr();
    CHECK(refused(t).size() < 400);
  }
  {  // files given as the wrong ranks
    auto t = trace;
    std::swap(t[0], t[1]);
    CHECK(refused(t).find("t.0.et: its metadata's rank is not 0") != std::string::npos);
  }
  {  // a dependency on a later node
    auto t = trace;
    t[0].nodes[2].add_data_deps(7);
    CHECK(refused(t).find("depends on node 7, which does not come before it") != std::string::npos);
  }
  {  // a repeated id
    auto t = trace;
    t[0].nodes[2].set_id(1);
    CHECK(refused(t).find("its id repeats") != std::string::npos);
  }
  {  // a send written as a compute node
    auto t = trace;
    for (Node& n : t[0].nodes)
      if (n.type() == ChakraProtoMsg::COMM_SEND_NODE) {
        n.set_type(ChakraProtoMsg::COMP_NODE);
        break;
      }
    CHECK(refused(t).find("a send op is a COMM_SEND_NODE") != std::string::npos);
  }
  {  // an op line that does not parse: named by its node
    auto t = trace;
    for (auto& a : *t[1].nodes[4].mutable_attr())
      if (a.name() == "trainsim_op") a.set_string_val("forward L9 {0}");
    const std::string why = refused(t);
    CHECK(why.find("t.1.et: node 4: its trainsim_op:") != std::string::npos);
  }
  {  // ranks of two schedules
    auto t = trace;
    for (auto& a : *t[1].metadata.mutable_attr())
      if (a.name() == "trainsim_header") a.set_string_val(a.string_val() + "group 1 0 1\n");
    CHECK(refused(t).find("t.1.et: its trainsim_header differs from t.0.et's") != std::string::npos);
  }
  // Bytes that are not a trace, a cut file, an empty one.
  const std::string bytes = chakra_file_bytes(trace[0]);
  CHECK_THROWS_WITH_AS(parse_chakra_file("", "x.0.et", 100), doctest::Contains("x.0.et: the file is empty"), ChakraError);
  CHECK_THROWS_AS(parse_chakra_file("\xff\xff\xff\xff\xff\xff", "x.0.et", 100), ChakraError);
  CHECK_THROWS_WITH_AS(parse_chakra_file(bytes.substr(0, bytes.size() - 5), "x.0.et", 100),
                       doctest::Contains("is not a Chakra node"), ChakraError);
  CHECK_THROWS_WITH_AS(parse_chakra_file(bytes, "x.0.et", 3), doctest::Contains("more than 3 nodes"), ChakraError);
}

TEST_CASE("chakra: trainsim convert writes PREFIX.r.et and the groups, reads them back, and says what is wrong") {
  auto dir = fresh_dir("chakra-cli");
  const std::string sched = (dir / "3d.sched").string(), prefix = (dir / "3d.et").string();
  REQUIRE(run_trainsim("gen 3d --tp 2 --pp 2 --dp 2 --microbatches 2 -o " + sched).exit_code == 0);
  CommandResult r = run_trainsim("convert " + sched + " " + prefix);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("8 ranks") != std::string::npos);
  for (int rank = 0; rank < 8; ++rank) CHECK(std::filesystem::exists(dir / ("3d." + std::to_string(rank) + ".et")));
  CHECK(nlohmann::json::parse(slurp(dir / "3d.comm_groups.json"))["0"].size() == 8);
  const std::string back = (dir / "back.sched").string();
  r = run_trainsim("convert " + prefix + " " + back);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("it validates") != std::string::npos);
  CHECK(slurp(back) == slurp(sched));
  // chakra_jsonizer's form
  const std::string json = (dir / "3d.json").string();
  REQUIRE(run_trainsim("convert " + prefix + " " + json).exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  CHECK(j["ranks"].size() == 8);
  CHECK(j["ranks"][0]["global_metadata"]["version"] == kChakraSchemaVersion);
  CHECK(j["ranks"][0]["nodes"][1].contains("ctrlDeps"));
  // A missing rank file, a garbage file.
  std::filesystem::remove(dir / "3d.5.et");
  r = run_trainsim("convert " + prefix + " " + back, true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("3d.5.et") != std::string::npos);
  std::ofstream(dir / "3d.5.et") << "not a trace";
  r = run_trainsim("convert " + prefix + " " + back, true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("3d.5.et") != std::string::npos);
  // An invalid schedule is not written out.
  const std::string bad = (dir / "bad.sched").string();
  std::ofstream(bad) << "trainsim-schedule 1\nworld_size 2\nlayers 1\nmicrobatches 1\ncost_model unit\n\nrank 0\n"
                        "  recv from 1 -> A0{0}\n\nrank 1\n  recv from 0 -> A0{0}\n";
  r = run_trainsim("convert " + bad + " " + (dir / "bad.et").string(), true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("does not validate") != std::string::npos);
}

TEST_CASE("chakra: the ASTRA-sim example runs") {
  auto dir = fresh_dir("chakra-example");
  const std::string cmd = "TRAINSIM=" + std::string(TRAINSIM_BINARY) + " " + TRAINSIM_SOURCE_DIR +
                          "/examples/chakra-astra-sim.sh " + (dir / "out").string() + " > " + (dir / "log").string() +
                          " 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  CHECK(std::filesystem::exists(dir / "out" / "3d.7.et"));
  CHECK(slurp(dir / "log").find("--workload-configuration=" + (dir / "out" / "3d").string()) != std::string::npos);
}

TEST_CASE("chakra: mutated files end in a clear error or a schedule, never a crash or another exception") {
  // A deterministic small fuzz: bytes of a valid 2-rank trace flipped, cut or repeated; each result is read as
  // rank 1's file. Reading may throw ChakraError only; what it reads is simulated (which returns, never throws).
  const std::vector<ChakraRank> trace = chakra_trace(small("1f1b"));
  const std::string good = chakra_file_bytes(trace[1]);
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  auto next = [&] { return x ^= x << 13, x ^= x >> 7, x ^= x << 17, x; };
  int read = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = good;
    switch (next() % 3) {
      case 0:
        for (int k = 0; k < 1 + static_cast<int>(next() % 4); ++k) bytes[next() % bytes.size()] = static_cast<char>(next());
        break;
      case 1: bytes.resize(next() % bytes.size()); break;
      default: bytes.insert(next() % bytes.size(), bytes.substr(next() % bytes.size(), 1 + next() % 64)); break;
    }
    try {
      ChakraRank rank = parse_chakra_file(bytes, "m.1.et", 1 << 16);
      const Schedule s = schedule_from_chakra({trace[0], std::move(rank)}, {"m.0.et", "m.1.et"});
      (void)simulate(s);
      ++read;
    } catch (const ChakraError&) {
      ++refused;
    }
  }
  CHECK(read + refused == 3000);
  CHECK(refused > 0);
}
