// PyTorch pipelining CSV: import (compute-only and compute+comms), export, round trips, errors, `trainsim convert`.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "cli_helpers.h"
#include "pytorch_runtime_helpers.h"
#include "schedules/generators.h"
#include "interop/pytorch_csv.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// 1F1B, 4 stages on 4 ranks, 8 microbatches, written by hand: rank r warms up with 3 - r forwards, then
// alternates forward and backward, then drains its backwards. Leading empty cells are idle time, as
// PyTorch's dumps have them.
const char* kOneFOneB =
    "0F0,0F1,0F2,0F3,,,,0B0,0F4,0B1,0F5,0B2,0F6,0B3,0F7,0B4,,0B5,,0B6,,0B7\n"
    ",1F0,1F1,1F2,,,1B0,1F3,1B1,1F4,1B2,1F5,1B3,1F6,1B4,1F7,1B5,,1B6,,1B7\n"
    ",,2F0,2F1,,2B0,2F2,2B1,2F3,2B2,2F4,2B3,2F5,2B4,2F6,2B5,2F7,2B6,,2B7\n"
    ",,,3F0,3B0,3F1,3B1,3F2,3B2,3F3,3B3,3F4,3B4,3F5,3B5,3F6,3B6,3F7,3B7\n";

// V style: 4 stages on 2 ranks (rank 0 holds stages 0 and 3, rank 1 stages 1 and 2), 4 microbatches,
// backward split into input (I) and weight (W) halves, weight halves deferred to fill bubbles.
const char* kZeroBubbleV =
    "0F0,0F1,,3F0,3I0,3W0,0F2,3F1,3I1,3W1,0F3,3F2,3I2,0I0,3W2,3F3,3I3,0I1,3W3,0W0,0I2,0W1,0I3,0W2,0W3\n"
    ",1F0,2F0,1F1,2F1,2I0,1I0,1F2,2F2,2I1,1I1,2W0,1W0,1F3,2F3,2I2,1I2,2W1,1W1,2I3,1I3,2W2,1W2,2W3,1W3\n";

// V style again, full backwards, rank 0 running all its stage-0 forwards first: receiving each activation
// right before the compute that reads it would deadlock over one-message channels (each rank blocked in a
// send the other has not yet received), so the import receives some earlier.
const char* kGreedyV =
    "0F0,0F1,0F2,0F3,3F0,3B0,3F1,3B1,3F2,3B2,3F3,3B3,0B0,0B1,0B2,0B3\n"
    "1F0,2F0,1F1,2F1,1F2,2F2,1F3,2F3,2B0,1B0,2B1,1B1,2B2,1B2,2B3,1B3\n";

// Loop style (interleaved): 4 stages on 2 ranks, stage s on rank s % 2, 4 microbatches.
const char* kInterleaved =
    "0F0,0F1,2F0,2F1,0F2,0F3,2F2,2B0,2F3,2B1,0B0,0B1,2B2,2B3,0B2,0B3\n"
    "1F0,1F1,3F0,3B0,3F1,3B1,1F2,1F3,1B0,1B1,3F2,3B2,3F3,3B3,1B2,1B3\n";

// Compute+comms form, 2 stages on 2 ranks, 2 microbatches, with FSDP actions around each stage's work.
const char* kComms =
    "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0RESHARD\n"
    "1UNSHARD,1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1RESHARD\n";

// A hand-written schedule (2 ranks, 2 stages, 2 microbatches, GPipe order), as a program would record it.
const char* kGPipeSched = R"(trainsim-schedule 1
world_size 2
layers 2
microbatches 2
cost_model unit
p2p per-pair
stage_map 0 1

rank 0
  load -> W0 O0 A0{0} A0{1}
  forward L0 {0}
  send to 1 : A1{0}
  free : A1{0}
  forward L0 {1}
  send to 1 : A1{1}
  free : A1{1}
  recv from 1 -> dA1{0}
  backward L0 {0}
  free : A0{0} dA1{0} dA0{0}
  recv from 1 -> dA1{1}
  backward L0 {1}
  free : A0{1} dA1{1} dA0{1}
  accumulate : dW0{0} dW0{1} -> dW0{0-1}
  update L0
rank 1
  load -> W1 O1
  recv from 0 -> A1{0}
  forward L1 {0}
  loss {0}
  free : A2{0}
  recv from 0 -> A1{1}
  forward L1 {1}
  loss {1}
  free : A2{1}
  backward L1 {0}
  send to 0 : dA1{0}
  free : A1{0} dA2{0} dA1{0}
  backward L1 {1}
  send to 0 : dA1{1}
  free : A1{1} dA2{1} dA1{1}
  accumulate : dW1{0} dW1{1} -> dW1{0-1}
  update L1
)";

struct ComputeStep {
  OpKind kind;
  int layer;
  IdSet batches;
  friend bool operator==(const ComputeStep&, const ComputeStep&) = default;
};

// Each rank's forward / backward / backward-input / backward-weight ops, in order.
std::vector<std::vector<ComputeStep>> compute_order(const Schedule& s) {
  std::vector<std::vector<ComputeStep>> out(s.ranks.size());
  for (std::size_t r = 0; r < s.ranks.size(); ++r)
    for (const Op& op : s.ranks[r])
      if (op.kind == OpKind::Forward || op.kind == OpKind::Backward || op.kind == OpKind::BackwardInput ||
          op.kind == OpKind::BackwardWeight)
        out[r].push_back({op.kind, op.layer, op.batches});
  return out;
}

// The ops of `rank` as .sched lines.
std::vector<std::string> lines(const Schedule& s, int rank) {
  std::vector<std::string> out;
  for (const Op& op : s.ranks[rank]) out.push_back(print_op(op, s.header));
  return out;
}

// Index of the first op of `rank` printed as `line`; -1 when none.
int index_of(const Schedule& s, int rank, const std::string& line) {
  auto ls = lines(s, rank);
  for (std::size_t i = 0; i < ls.size(); ++i)
    if (ls[i] == line) return static_cast<int>(i);
  return -1;
}

void check_valid(const Schedule& s) {
  SimResult r = simulate(s);
  INFO(r.error);
  CHECK(r.ok);
}

std::string import_error(const std::string& csv, int microbatches = 0, std::vector<int> map = {}) {
  try {
    import_pytorch_csv(csv, microbatches, map, "t.csv");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("pytorch csv: hand-written 1F1B (4 stages, 8 microbatches) imports into a schedule that validates") {
  Schedule s = import_pytorch_csv(kOneFOneB, 0, {}, "1f1b.csv");
  const ScheduleHeader& h = s.header;
  CHECK(h.world_size == 4);
  CHECK(h.layers == 4);
  CHECK(h.microbatches == 8);
  CHECK(h.stage_map == std::vector<int>{0, 1, 2, 3});
  CHECK(h.cost_model == "unit");
  CHECK(h.p2p == P2PMode::PerPairChannel);
  CHECK(h.groups.empty());
  SimResult r = simulate(s);
  INFO(r.error);
  REQUIRE(r.ok);
  // With unit costs (forward = backward = 1) 1F1B's bubble is (p-1)/(m+p-1).
  CHECK(r.trace.bubble_fraction() == doctest::Approx(3.0 / 11.0));
  CHECK(to_seconds(r.trace.makespan()) == doctest::Approx(22));

  // What the import inserts, on rank 1 (stage 1): loads, a receive right before each compute that needs one,
  // a send right after each compute whose consumer is on another rank, frees, accumulation, the update.
  auto l1 = lines(s, 1);
  CHECK(l1.front() == "load -> W1 O1");
  int f3 = index_of(s, 1, "forward L1 {3}");
  REQUIRE(f3 > 0);
  CHECK(l1[f3 - 1] == "recv from 0 stream 2 -> A1{3}");
  CHECK(l1[f3 + 1] == "send to 2 stream 1 : A2{3}");
  CHECK(l1[f3 + 2] == "free : A2{3}");
  int b0 = index_of(s, 1, "backward L1 {0}");
  CHECK(l1[b0 - 1] == "recv from 2 stream 4 -> dA2{0}");
  CHECK(l1[b0 + 1] == "free : A1{0} dA2{0}");
  CHECK(l1[b0 + 2] == "send to 0 stream 1 : dA1{0}");
  CHECK(l1[b0 + 3] == "free : dA1{0}");
  CHECK(l1.back() == "free : dW1{0-7}");
  CHECK(l1[l1.size() - 2] == "update L1");
  CHECK(index_of(s, 1, "accumulate : dW1{0} dW1{1} -> dW1{0-1}") > 0);
  // Rank 0 loads each input as its forward needs it; rank 3 computes the loss after each forward.
  CHECK(lines(s, 0)[index_of(s, 0, "forward L0 {5}") - 1] == "load -> A0{5}");
  CHECK(lines(s, 3)[index_of(s, 3, "forward L3 {2}") + 1] == "loss {2}");
  CHECK(lines(s, 3)[index_of(s, 3, "forward L3 {2}") + 2] == "free : A4{2}");
  // Ops carry the cell they came from.
  CHECK(s.ranks[1][f3].where == "1f1b.csv:2:8");

  // The .sched text of the import parses back to the same ops.
  Schedule back = parse_schedule(print_schedule(s), "back.sched");
  CHECK(print_schedule(back) == print_schedule(s));
  check_valid(back);
}

TEST_CASE("pytorch csv: V-style schedules import, the stage map inferred") {
  SUBCASE("zero-bubble V with split backward") {
    Schedule s = import_pytorch_csv(kZeroBubbleV);
    CHECK(s.header.stage_map == std::vector<int>{0, 1, 1, 0});
    CHECK(s.header.layers == 4);
    CHECK(s.header.microbatches == 4);
    check_valid(s);
    // Stage 1 -> 2 and 2 -> 1 stay on rank 1: no send or receive between them.
    for (const std::string& l : lines(s, 1))
      if (l.rfind("send", 0) == 0 || l.rfind("recv", 0) == 0) CHECK(l.find("A2{") == std::string::npos);
    // The last stage's output grad comes from the loss on rank 0.
    CHECK(index_of(s, 0, "loss {0}") == index_of(s, 0, "forward L3 {0}") + 1);
    CHECK(index_of(s, 0, "backward-input L3 {0}") > 0);
    CHECK(index_of(s, 0, "backward-weight L3 {0}") > 0);
  }
  SUBCASE("greedy V: receives move earlier where one-message channels need it") {
    Schedule s = import_pytorch_csv(kGreedyV);
    CHECK(s.header.stage_map == std::vector<int>{0, 1, 1, 0});
    check_valid(s);
    // Rank 1 receives A1{2} before its forward of stage 1 batch 1 (rank 0 sends A1{3} before it can take A3{0}).
    CHECK(index_of(s, 1, "recv from 0 -> A1{2}") < index_of(s, 1, "forward L1 {1}"));
    CHECK(index_of(s, 1, "recv from 0 -> A1{3}") < index_of(s, 1, "forward L1 {3}"));
  }
  SUBCASE("loop-style interleaved") {
    Schedule s = import_pytorch_csv(kInterleaved);
    CHECK(s.header.stage_map == std::vector<int>{0, 1, 0, 1});
    check_valid(s);
  }
}

TEST_CASE("pytorch csv: compute-only export, import, export gives the same bytes") {
  for (const char* csv : {kOneFOneB, kZeroBubbleV, kGreedyV, kInterleaved, kComms}) {
    CAPTURE(csv);
    Schedule s = import_pytorch_csv(csv);
    std::string once = export_pytorch_csv(s, CsvForm::ComputeOnly);
    Schedule again = import_pytorch_csv(once);
    check_valid(again);
    CHECK(export_pytorch_csv(again, CsvForm::ComputeOnly) == once);
    CHECK(compute_order(again) == compute_order(s));
    // Comms form: the imported schedule writes out its sends, receives and FSDP actions, and reads back the same.
    std::string comms = export_pytorch_csv(s, CsvForm::ComputeComms);
    Schedule from_comms = import_pytorch_csv(comms);
    check_valid(from_comms);
    CHECK(export_pytorch_csv(from_comms, CsvForm::ComputeComms) == comms);
    CHECK(compute_order(from_comms) == compute_order(s));
  }
  // Without idle cells the export is the input itself.
  CHECK(export_pytorch_csv(import_pytorch_csv(kInterleaved), CsvForm::ComputeOnly) == kInterleaved);
  CHECK(export_pytorch_csv(import_pytorch_csv(kComms), CsvForm::ComputeComms) == kComms);
}

TEST_CASE("pytorch csv: export of a hand-written schedule, and its import keeps each rank's compute order") {
  Schedule s = parse_schedule(kGPipeSched, "gpipe.sched");
  check_valid(s);
  CHECK(export_pytorch_csv(s, CsvForm::ComputeOnly) == "0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n");
  CHECK(export_pytorch_csv(s, CsvForm::ComputeComms) ==
        "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
        "1RECV_F0,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n");
  for (CsvForm form : {CsvForm::ComputeOnly, CsvForm::ComputeComms}) {
    Schedule back = import_pytorch_csv(export_pytorch_csv(s, form));
    check_valid(back);
    CHECK(compute_order(back) == compute_order(s));
    CHECK(back.header.stage_map == s.header.stage_map);
    CHECK(back.header.microbatches == 2);
  }
}

TEST_CASE("pytorch csv: export needs a stage map and one microbatch per action, FSDP ops map to actions") {
  Schedule s = parse_schedule(kGPipeSched, "gpipe.sched");
  s.header.stage_map.clear();
  CHECK_THROWS_WITH_AS(export_pytorch_csv(s, CsvForm::ComputeOnly), doctest::Contains("no stage map"), std::invalid_argument);

  Schedule batched = parse_schedule(R"(trainsim-schedule 1
world_size 1
layers 1
microbatches 2
stage_map 0
rank 0
  load -> W0 O0 A0{0-1}
  forward L0 {0-1}
)",
                                    "b.sched");
  CHECK_THROWS_WITH_AS(export_pytorch_csv(batched, CsvForm::ComputeOnly),
                       doctest::Contains("works on 2 microbatches at once ({0-1})"), std::invalid_argument);

  // Weights sharded over two ranks that both run stage 0: the stage would sit on two rows, which the import
  // refuses, so the export refuses it, naming the op (docs/pytorch-csv.md §4: one stage per rank).
  Schedule fsdp = parse_schedule(R"(trainsim-schedule 1
world_size 2
layers 1
microbatches 2
stage_map 0
group 1 0 1
rank 0
  load -> W0[0/2] O0[0/2] A0{0}
  all-gather L0 group 1 : W0[0/2] -> W0
  forward L0 {0}
  free : W0
  reduce-scatter L0 group 1 : dW0{0} -> dW0{0-1}[0/2]
rank 1
  load -> W0[1/2] O0[1/2] A0{1}
  all-gather L0 group 1 : W0[1/2] -> W0
  forward L0 {1}
  free : A0{1} W0
  reduce-scatter L0 group 1 : dW0{1} -> dW0{0-1}[1/2]
)",
                                 "fsdp.sched");
  for (CsvForm form : {CsvForm::ComputeComms, CsvForm::ComputeOnly})
    CHECK_THROWS_WITH_AS(export_pytorch_csv(fsdp, form),
                         doctest::Contains("rank 1: forward layer 0 batches {1} (fsdp.sched:16): the stage map puts "
                                           "stage 0 on rank 0; a PyTorch CSV holds each stage on one rank"),
                         std::invalid_argument);
  // FSDP actions of stages on one rank each: all-gather -> UNSHARD, freeing the gathered weight -> RESHARD,
  // reduce-scatter of weight grads -> REDUCE_GRAD.
  const std::string lowered = "0UNSHARD,0F0,0F1,1UNSHARD,1F0,1F1,1B1,1B0,1RESHARD,1REDUCE_GRAD,0B1,0B0,0RESHARD,"
                              "0REDUCE_GRAD\n";
  Schedule fsdp_one = import_pytorch_csv(lowered, 2, {0, 0}, "fsdp.csv");
  CHECK(export_pytorch_csv(fsdp_one, CsvForm::ComputeComms) == lowered);
  CHECK(export_pytorch_csv(fsdp_one, CsvForm::ComputeOnly) == "0F0,0F1,1F0,1F1,1B1,1B0,0B1,0B0\n");
}

TEST_CASE("pytorch csv: compute+comms import keeps the sends and receives, maps FSDP actions") {
  Schedule s = import_pytorch_csv(kComms, 0, {}, "comms.csv");
  check_valid(s);
  // One group per rank that runs FSDP actions: the ranks holding its stages (one rank each).
  CHECK(s.header.groups == std::vector<std::vector<int>>{{0}, {1}});
  auto l0 = lines(s, 0);
  CHECK(l0 == std::vector<std::string>{
                  "load -> W0 O0",
                  "all-gather L0 group 1 : W0 -> W0",
                  "load -> A0{0}",
                  "forward L0 {0}",
                  "send to 1 stream 1 : A1{0}",
                  "free : A1{0}",
                  "load -> A0{1}",
                  "forward L0 {1}",
                  "send to 1 stream 1 : A1{1}",
                  "free : A1{1}",
                  "recv from 1 stream 3 -> dA1{0}",
                  "backward L0 {0}",
                  "free : A0{0} dA1{0} dA0{0}",
                  "recv from 1 stream 3 -> dA1{1}",
                  "backward L0 {1}",
                  "free : A0{1} dA1{1} dA0{1}",
                  "accumulate : dW0{0} dW0{1} -> dW0{0-1}",
                  "free : dW0{0} dW0{1}",
                  "reduce-scatter L0 group 1 : dW0{0-1} -> dW0{0-1}",
                  "free : W0",
                  "update L0",
                  "free : dW0{0-1} dW0{0-1}",
              });
  // Sends and receives stay where the CSV has them.
  CHECK(lines(s, 1)[index_of(s, 1, "forward L1 {1}") - 1] == "recv from 0 stream 2 -> A1{1}");
  CHECK(s.ranks[1][index_of(s, 1, "forward L1 {1}") - 1].where == "comms.csv:2:6");
}

TEST_CASE("pytorch csv: import errors name the row, column and cell") {
  // An unknown action.
  std::string e = import_error("0F0,0B0\n1F0,0X1,1B0\n");
  CHECK(e.find("t.csv: row 2 (rank 1), column 2, cell '0X1': unknown action type 'X'") != std::string::npos);
  CHECK(import_error("0F0,0B\n").find("column 2, cell '0B': B needs a microbatch number") != std::string::npos);
  CHECK(import_error("0F0,0UNSHARD1\n").find("UNSHARD is per stage and takes no microbatch") != std::string::npos);
  CHECK(import_error("F0\n").find("cell 'F0': expected an action") != std::string::npos);

  // A stage on two ranks.
  e = import_error("0F0,0B0\n0F1,0B1\n");
  CHECK(e.find("row 2 (rank 1), column 1, cell '0F1': stage 0 is on two ranks: rank 0 holds it too (row 1, column 1, "
               "cell '0F0')") != std::string::npos);

  // A missing microbatch's backward: the forward's cell is named.
  e = import_error("0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n");
  CHECK(e.find("row 1 (rank 0), column 2, cell '0F1': microbatch 1 of stage 0 has a forward but no backward") !=
        std::string::npos);
  // A missing forward (more microbatches asked for than the CSV has).
  CHECK(import_error("0F0,0B0\n1F0,1B0\n", 2).find("row 1 (rank 0): stage 0 has no forward of microbatch 1") !=
        std::string::npos);
  CHECK(import_error("0F0,0B0,0F1,0B1\n1F0,1B0,1F1,1B1\n", 1).find("cell '0F1': microbatch 1 is out of range") !=
        std::string::npos);
  // Half a split backward, and B mixed with W.
  CHECK(import_error("0F0,0I0\n").find("cell '0I0': a backward input without its backward weight '0W0'") != std::string::npos);
  CHECK(import_error("0F0,0B0,0W0\n").find("write it as I") != std::string::npos);
  // A duplicate.
  CHECK(import_error("0F0,0F0,0B0\n").find("column 2, cell '0F0': 0F0 appears twice") != std::string::npos);
  // Out of order on one rank.
  CHECK(import_error("0B0,0F0\n").find("cell '0B0': its forward '0F0' (column 2) is not before it") != std::string::npos);

  // Stage maps: neither loop nor V when inferred; a given map the rows disagree with.
  e = import_error("0F0,1F0,1B0,0B0\n2F0,3F0,3B0,2B0\n");
  CHECK(e.find("neither loop style") != std::string::npos);
  CHECK(e.find("--stage-map 0,0,1,1") != std::string::npos);
  Schedule ok = import_pytorch_csv("0F0,1F0,1B0,0B0\n2F0,3F0,3B0,2B0\n", 0, {0, 0, 1, 1});
  check_valid(ok);
  CHECK(import_error("0F0,0B0\n1F0,1B0\n", 0, {1, 0}).find("cell '0F0': stage 0 belongs to rank 1 by the stage map") !=
        std::string::npos);
  CHECK(import_error("0F0,0B0\n1F0,1B0\n", 0, {0, 1, 1}).find("the stage map gives 3 stages") != std::string::npos);

  // A compute-only CSV that cannot run: each rank waits for the other.
  e = import_error("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
  CHECK(e.find("cannot run") != std::string::npos);
  CHECK(e.find("row 1 (rank 0), column 2, cell '0B0' waits for '1B0'") != std::string::npos);
  CHECK(e.find("row 2 (rank 1), column 1, cell '1F1' waits for '0F1'") != std::string::npos);

  CHECK(import_error("0F0,0B0\n2F0,2B0\n").find("stage 1 appears in no row, but the CSV uses stages up to 2") !=
        std::string::npos);
  CHECK(import_error("").find("no rows") != std::string::npos);
  CHECK(import_error(",,\n").find("no actions") != std::string::npos);
}

TEST_CASE("pytorch csv: compute+comms errors: every SEND needs its RECV on the peer rank") {
  // 0SEND_F0 has no 1RECV_F0 on rank 1.
  std::string e = import_error("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0\n");
  CHECK(e.find("row 1 (rank 0), column 2, cell '0SEND_F0': no matching '1RECV_F0' on rank 1") != std::string::npos);
  // A receive without its send.
  e = import_error("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0\n");
  CHECK(e.find("cell '0RECV_B0': no matching '1SEND_B0' on rank 1") != std::string::npos);
  // A consumer on another rank with nothing sent to it.
  e = import_error("0UNSHARD,0F0,0B0,0RESHARD\n1F0,1B0\n");
  CHECK(e.find("row 1 (rank 0), column 3, cell '0B0': stage 1 is on rank 1: receive the gradient first ('0RECV_B0' "
               "before this cell)") != std::string::npos);
  e = import_error("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n");
  CHECK(e.find("row 2 (rank 1), column 1, cell '1F0': stage 0 is on rank 0: receive the input first ('1RECV_F0' "
               "before this cell)") != std::string::npos);
  // Sending to a stage on the same rank; the last stage sending.
  CHECK(import_error("0F0,0SEND_F0,1F0,1B0,0B0\n", 0, {0, 0}).find("stage 1 is on this rank too: nothing to send") !=
        std::string::npos);
  CHECK(import_error("0F0,0SEND_F0,0B0\n").find("the last stage") != std::string::npos);
  // FSDP windows: compute of an unsharded stage outside UNSHARD..RESHARD; REDUCE_GRAD before a backward.
  CHECK(import_error("0UNSHARD,0F0,0RESHARD,0B0\n").find("cell '0B0': stage 0 uses UNSHARD, and its weight is not unsharded") !=
        std::string::npos);
  CHECK(import_error("0RESHARD,0F0,0B0\n").find("cell '0RESHARD': stage 0 is not unsharded here") != std::string::npos);
  CHECK(import_error("0F0,0REDUCE_GRAD,0B0\n").find("cell '0REDUCE_GRAD': it reduces stage 0's weight grads, but "
                                                     "microbatch 0's ('0B0', column 3) comes after it") != std::string::npos);
}

TEST_CASE("trainsim convert: csv <-> sched, options, errors and --help") {
  auto dir = fresh_dir("convert");
  {
    std::ofstream f(dir / "1f1b.csv", std::ios::binary);
    f << kOneFOneB;
  }
  std::string csv = (dir / "1f1b.csv").string(), sched = (dir / "1f1b.sched").string(), out = (dir / "out.csv").string();

  CommandResult r = run_trainsim("convert " + csv + " " + sched, true);
  INFO(r.out);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("4 ranks, 4 stages, 8 microbatches") != std::string::npos);
  CHECK(r.out.find("it validates") != std::string::npos);
  Schedule s = read_schedule_file(sched);
  check_valid(s);

  r = run_trainsim("convert " + sched + " " + out, true);
  CHECK(r.exit_code == 0);
  CHECK(slurp(out) == export_pytorch_csv(s, CsvForm::ComputeOnly));
  r = run_trainsim("convert " + sched + " " + out + " --form comms", true);
  CHECK(r.exit_code == 0);
  CHECK(slurp(out) == export_pytorch_csv(s, CsvForm::ComputeComms));

  // --stage-map and --microbatches on import.
  r = run_trainsim("convert " + csv + " " + sched + " --stage-map loop --microbatches 8", true);
  CHECK(r.exit_code == 0);
  r = run_trainsim("convert " + csv + " " + sched + " --stage-map 0,1,2,3", true);
  CHECK(r.exit_code == 0);
  // A CSV that does not fit the options was read and is wrong (exit 1); a map that is no map is a usage error (2).
  r = run_trainsim("convert " + csv + " " + sched + " --stage-map 1,0,2,3", true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("stage 0 belongs to rank 1 by the stage map") != std::string::npos);
  r = run_trainsim("convert " + csv + " " + sched + " --stage-map 0,1,2", true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("--stage-map gives 3 stages, but there are 4") != std::string::npos);
  r = run_trainsim("convert " + csv + " " + sched + " --stage-map 0,x", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("trainsim convert: --stage-map: takes ranks like 0,1,2,3 or 'loop' or 'v', got '0,x'") !=
        std::string::npos);
  r = run_trainsim("convert " + csv + " " + sched + " --microbatches 9", true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("stage 0 has no forward of microbatch 8") != std::string::npos);

  // Bad input: an unknown cell, wrong extensions, options for the other direction, a missing file.
  {
    std::ofstream f(dir / "bad.csv", std::ios::binary);
    f << "0F0,0B0\n1F0,0X1,1B0\n";
  }
  r = run_trainsim("convert " + (dir / "bad.csv").string() + " " + sched, true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("row 2 (rank 1), column 2, cell '0X1'") != std::string::npos);
  r = run_trainsim("convert " + csv + " " + (dir / "x.txt").string(), true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("the direction follows the extensions") != std::string::npos);
  r = run_trainsim("convert " + csv + " " + sched + " --form comms", true);
  CHECK(r.exit_code == 2);
  r = run_trainsim("convert " + sched + " " + out + " --form other", true);
  CHECK(r.exit_code == 2);
  r = run_trainsim("convert " + sched + " " + out + " --microbatches 4", true);
  CHECK(r.exit_code == 2);
  r = run_trainsim("convert " + (dir / "none.csv").string() + " " + sched, true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("cannot read") != std::string::npos);

  CommandResult help = run_trainsim("convert --help");
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("--stage-map") != std::string::npos);
  CHECK(help.out.find("--form") != std::string::npos);
  CHECK(help.out.find("--microbatches") != std::string::npos);
}

TEST_CASE("pytorch csv: an OVERLAP_F_B cell imports as its two actions, in order") {
  // 1F1B on 2 stages, compute-only; on the last stage, B0 then F1 become one overlapped cell F1 + B0.
  const std::string plain = "0F0,0F1,0F2,0B0,0B1,0B2\n1F0,1F1,1B0,1F2,1B1,1B2\n";
  const std::string overlapped = "0F0,0F1,0F2,0B0,0B1,0B2\n1F0,(1F1;1B0)OVERLAP_F_B,1F2,1B1,1B2\n";
  Schedule a = import_pytorch_csv(plain, 3), b = import_pytorch_csv(overlapped, 3);
  REQUIRE(a.ranks.size() == b.ranks.size());
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    REQUIRE(a.ranks[r].size() == b.ranks[r].size());
    for (std::size_t i = 0; i < a.ranks[r].size(); ++i) {
      CHECK(a.ranks[r][i].kind == b.ranks[r][i].kind);
      CHECK(a.ranks[r][i].layer == b.ranks[r][i].layer);
      CHECK(a.ranks[r][i].batches == b.ranks[r][i].batches);
    }
  }
  CHECK(simulate(b).ok);
  // Errors name the cell.
  auto error = [](const std::string& csv) {
    try {
      import_pytorch_csv(csv, 2, {}, "o.csv");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error("0F0,(0F1;0SEND_F0)OVERLAP_F_B\n").find("OVERLAP_F_B pairs compute actions (F, B, I, W), not '0SEND_F0'") !=
        std::string::npos);
  CHECK(error("0F0,(0F1)OVERLAP_F_B\n").find("OVERLAP_F_B needs two actions") != std::string::npos);
  CHECK(error("0F0,(0F1;0B0)OVERLAP\n").find("column 2, cell '(0F1;0B0)OVERLAP'") != std::string::npos);
}

TEST_CASE("pytorch csv: a backward weight after RESHARD is refused (PyTorch needs the stage unsharded)") {
  std::string e;
  try {
    import_pytorch_csv("0UNSHARD,0F0,0I0,0RESHARD,0W0,0REDUCE_GRAD\n", 1, {}, "w.csv");
  } catch (const std::invalid_argument& x) {
    e = x.what();
  }
  CHECK(e.find("w.csv: row 1 (rank 0), column 5, cell '0W0': stage 0 is resharded here") != std::string::npos);
  CHECK(import_pytorch_csv("0UNSHARD,0F0,0I0,0W0,0RESHARD,0REDUCE_GRAD\n", 1).ranks.size() == 1);
}

TEST_CASE("pytorch csv: interleaved 1F1B with microbatches not a multiple of the stages converts and comes back") {
  // PyTorch's ScheduleInterleaved1F1B accepts these (one round of m microbatches, or m / rounds per round).
  for (auto [p, m, v] : {std::tuple{4, 6, 2}, std::tuple{4, 10, 2}, std::tuple{3, 5, 3}, std::tuple{2, 3, 2}}) {
    CAPTURE(p);
    CAPTURE(m);
    CAPTURE(v);
    GenOptions o;
    o.stages = p, o.microbatches = m, o.chunks = v;
    Schedule s = generate("interleaved-1f1b", o);
    SimResult direct = simulate(s);
    REQUIRE(direct.ok);
    for (CsvForm form : {CsvForm::ComputeOnly, CsvForm::ComputeComms}) {
      Schedule back = import_pytorch_csv(export_pytorch_csv(s, form), m);
      check_valid(back);
      CHECK(compute_order(back) == compute_order(s));
      CHECK(simulate(back).summary.makespan == direct.summary.makespan);
    }
  }
}

TEST_CASE("pytorch csv: V style goes on past two stages per rank, as PyTorch's style=\"v\" mapping") {
  // PyTorch's generate_stage_to_rank_mapping(style="v"), step by step: the rank moves down, stays at the
  // border, moves up, stays, and so on.
  for (int ranks : {1, 2, 3, 4}) {
    int rank = 0;
    for (int stage = 0; stage < 4 * ranks; ++stage) {
      CAPTURE(ranks);
      CAPTURE(stage);
      CHECK(v_style_rank(stage, ranks) == rank);
      if ((stage + 1) % ranks == 0) continue;
      rank += (stage / ranks) % 2 == 0 ? 1 : -1;
    }
  }
  // Two ranks, six stages (three per rank, 0,1,1,0,0,1): inferred from the rows, and valid.
  const std::string csv =
      "0F0,3F0,4F0,4B0,3B0,0B0\n"
      "1F0,2F0,5F0,5B0,2B0,1B0\n";
  Schedule s = import_pytorch_csv(csv);
  CHECK(s.header.stage_map == std::vector<int>{0, 1, 1, 0, 0, 1});
  check_valid(s);
  // The command line's --stage-map v gives the same placement (it used to refuse more than two per rank).
  auto dir = fresh_dir("csv-v");
  std::ofstream(dir / "v6.csv") << csv;
  CommandResult r = run_trainsim("convert " + (dir / "v6.csv").string() + " " + (dir / "v6.sched").string() +
                                 " --stage-map v --microbatches 1", true);
  CHECK(r.exit_code == 0);
  CHECK(slurp(dir / "v6.sched").find("stage_map 0 1 1 0 0 1\n") != std::string::npos);
}

TEST_CASE("pytorch csv: ZBV, DualPipeV and interleaved zero bubble convert to CSV and back, placement inferred") {
  for (auto [kind, p, m] : {std::tuple{"zbv", 2, 3}, std::tuple{"zbv", 3, 8}, std::tuple{"zbv", 4, 9},
                            std::tuple{"dualpipev", 2, 4}, std::tuple{"dualpipev", 3, 8}, std::tuple{"dualpipev", 4, 11},
                            std::tuple{"interleaved-zb", 2, 4}, std::tuple{"interleaved-zb", 3, 6},
                            std::tuple{"interleaved-zb", 4, 10}}) {
    CAPTURE(kind);
    CAPTURE(p);
    CAPTURE(m);
    GenOptions o;
    o.stages = p, o.microbatches = m, o.chunks = 2;
    Schedule s = generate(kind, o);
    SimResult direct = simulate(s);
    REQUIRE(direct.ok);
    const bool v_shape = std::string(kind) != "interleaved-zb";
    for (int l = 0; l < 2 * p; ++l) CHECK(s.header.stage_map[l] == (v_shape ? v_style_rank(l, p) : l % p));
    for (CsvForm form : {CsvForm::ComputeOnly, CsvForm::ComputeComms}) {
      Schedule back = import_pytorch_csv(export_pytorch_csv(s, form), m);  // no stage map given: inferred
      CHECK(back.header.stage_map == s.header.stage_map);
      check_valid(back);
      CHECK(compute_order(back) == compute_order(s));
      CHECK(simulate(back).summary.makespan == direct.summary.makespan);
    }
  }
}

namespace {

std::vector<int> v_map(int p) {
  std::vector<int> m;
  for (int s = 0; s < 2 * p; ++s) m.push_back(pt::v_rank(s, p));
  return m;
}

std::vector<int> loop_map(int p) {
  std::vector<int> m;
  for (int s = 0; s < p; ++s) m.push_back(s);
  return m;
}

// The makespan trainsim simulates for `csv`, in seconds; fails the test when it does not run.
double simulated(const std::string& csv, int m) {
  SimResult r = simulate(import_pytorch_csv(csv, m));
  INFO(r.error);
  REQUIRE(r.ok);
  return to_seconds(r.trace.makespan());
}

// Checks that trainsim times `compute` (compute-only rows with OVERLAP_F_B cells) and its lowering as
// PyTorch's runtime runs it (the independent model of tests/pytorch_runtime_helpers.h), and returns that time.
double check_against_runtime(const pt::Rows& compute, const std::vector<int>& map, int m) {
  const pt::Rows lowered = pt::lower_send_recv(compute, map);
  const double expected = pt::runtime_makespan(lowered, map);
  CHECK(simulated(pt::to_csv(compute), m) == expected);
  CHECK(simulated(pt::to_csv(lowered), m) == expected);
  return expected;
}

}  // namespace

TEST_CASE("pytorch csv: DualPipeV's OVERLAP_F_B cells time as PyTorch's runtime runs them") {
  // 2 ranks, 4 microbatches, unit costs (each pass of a V schedule's half-stage 0.5 s: 2 ranks, 4 stages).
  // Rank 1's cell (2F2;1B0) runs 2F2 over its 7th pass and 1B0 over its 8th; PyTorch's lowering puts 2SEND_F2
  // after the cell and the runtime posts it after both passes, so rank 0's 3F2 starts a pass later, and every
  // later pass of rank 0 a pass later: 18 passes (9 s), where sending A3{2} right after 2F2 (trainsim before
  // this fix) gave 17 (8.5 s).
  const pt::Rows rows = pt::dualpipev_rows(2, 4);
  CHECK(pt::to_csv(rows) ==
        "0F0,0F1,0F2,3F0,3I0,3W0,3F1,(0F3;3B1)OVERLAP_F_B,(3F2;0B0)OVERLAP_F_B,3B2,(3F3;0B1)OVERLAP_F_B,3B3,0I2,0W2,"
        "0I3,0W3\n"
        "1F0,2F0,1F1,2F1,1F2,2B0,(2F2;1B0)OVERLAP_F_B,(1F3;2B1)OVERLAP_F_B,(2F3;1B1)OVERLAP_F_B,2B2,1B2,2I3,1I3,2W3,"
        "1W3\n");
  CHECK(check_against_runtime(rows, v_map(2), 4) == 9);
  // The lowered row keeps the sends after the cell: 2F2's send follows the cell, then 1B0's.
  const std::string lowered = pt::to_csv(pt::lower_send_recv(rows, v_map(2)));
  CHECK(lowered.find("(2F2;1B0)OVERLAP_F_B,2SEND_F2,1SEND_B0") != std::string::npos);
  // Sizes: the overlapped passes cost p - 1 passes (of 0.5 s) more than sending each output as soon as it exists.
  for (auto [p, m] : {std::pair{1, 2}, std::pair{1, 3}, std::pair{2, 5}, std::pair{2, 8}, std::pair{3, 6},
                      std::pair{3, 7}, std::pair{3, 12}, std::pair{4, 8}, std::pair{4, 11}, std::pair{5, 10}}) {
    CAPTURE(p);
    CAPTURE(m);
    const pt::Rows r = pt::dualpipev_rows(p, m);
    const double t = check_against_runtime(r, v_map(p), m);
    // trainsim's generator writes each pair as two passes with the forward's output sent at once.
    GenOptions o;
    o.stages = p, o.microbatches = m;
    const Schedule gen = generate("dualpipev", o);
    std::string flat;  // the same order without the cells
    for (const auto& row : r) {
      for (std::size_t i = 0; i < row.size(); ++i)
        for (std::size_t j = 0; j < row[i].size(); ++j) flat += (i || j ? "," : "") + pt::text(row[i][j]);
      flat += "\n";
    }
    CHECK(export_pytorch_csv(gen, CsvForm::ComputeOnly) == flat);
    SimResult g = simulate(gen);
    REQUIRE(g.ok);
    CHECK(to_seconds(g.trace.makespan()) == t - 0.5 * (p - 1));
  }
}

TEST_CASE("pytorch csv: OVERLAP_F_B cells on other schedules time as PyTorch's runtime runs them") {
  // 1F1B (loop placement) with each steady-state forward and the backward after it in one cell: the forward's
  // output leaves after the backward, at any stage and microbatch count.
  for (int p = 2; p <= 5; ++p)
    for (int m : {p, p + 1, 2 * p + 1}) {
      CAPTURE(p);
      CAPTURE(m);
      const pt::Rows rows = pt::overlapped_1f1b_rows(p, m);
      const double t = check_against_runtime(rows, loop_map(p), m);
      // Without the cells (each output sent at once) the same order is plain 1F1B, which is faster or equal.
      GenOptions o;
      o.stages = p, o.microbatches = m;
      CHECK(simulated(export_pytorch_csv(generate("1f1b", o), CsvForm::ComputeOnly), m) <= t);
    }
  // Schedules without OVERLAP_F_B cells: the model and trainsim agree too (their figures are unchanged).
  for (const char* kind : {"1f1b", "gpipe", "zbv", "dualpipev"})
    for (auto [p, m] : {std::pair{2, 4}, std::pair{3, 6}, std::pair{4, 9}}) {
      CAPTURE(kind);
      CAPTURE(p);
      GenOptions o;
      o.stages = p, o.microbatches = m;
      const Schedule s = generate(kind, o);
      const pt::Rows rows = pt::parse_csv(export_pytorch_csv(s, CsvForm::ComputeOnly));
      const double t = check_against_runtime(rows, s.header.stage_map, m);
      SimResult g = simulate(s);
      REQUIRE(g.ok);
      CHECK(to_seconds(g.trace.makespan()) == t);
    }
}

TEST_CASE("pytorch csv: an OVERLAP_F_B cell whose backward needs its forward's sent output cannot run") {
  // Stage 0's cell (0F0;0B0): 0B0 needs stage 1's backward, which needs A1{0}, which leaves only after the
  // whole cell. PyTorch's lowering refuses it ("Malformed compute schedule"); so does the import.
  std::string e;
  try {
    import_pytorch_csv("(0F0;0B0)OVERLAP_F_B\n1F0,1B0\n", 1, {}, "cycle.csv");
  } catch (const std::invalid_argument& x) {
    e = x.what();
  }
  CHECK(e.find("cycle.csv: the schedule cannot run") != std::string::npos);
  CHECK(e.find("row 1 (rank 0), column 1, cell '0B0' waits for '1B0' (rank 1, column 2)") !=
        std::string::npos);
  CHECK_THROWS(pt::lower_send_recv(pt::parse_csv("(0F0;0B0)OVERLAP_F_B\n1F0,1B0\n"), loop_map(2)));
  // The compute+comms form of it imports as written, and the simulator finds the deadlock: 0SEND_F0 waits
  // for the compute stream, which waits in 0B0 for rank 1's gradient, which waits for A1{0}.
  Schedule comms = import_pytorch_csv("0RECV_B0,(0F0;0B0)OVERLAP_F_B,0SEND_F0\n1RECV_F0,1F0,1B0,1SEND_B0\n", 1);
  SimResult r = simulate(comms);
  CHECK(!r.ok);
  CHECK(r.error.find("deadlock") != std::string::npos);
  // With the forward in a cell of its own the same rows run.
  CHECK(simulate(import_pytorch_csv("0RECV_B0,0F0,0SEND_F0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", 1)).ok);
}
