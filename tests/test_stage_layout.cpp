// Stage layouts (hardware/stage_layout.h, Megatron-LM's --pipeline-model-parallel-layout): the grammar and its
// errors, the `layout` header line, the generators' --layout, the hardware model's per-layer work and the
// bubble an uneven layout saves, tied embeddings across stages, the unit model's shares, and the executor
// replaying uneven layouts as single-device training does.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "exec_helpers.h"
#include "hardware/comm.h"
#include "hardware/cost_model.h"
#include "hardware/stage_layout.h"
#include "schedules/cost_models.h"
#include "schedules/generators.h"
#include "schedules/hardware_sim.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

std::vector<int> blocks_of(const std::string& text) { return hw::StageLayout::parse(text).blocks_per_layer(); }

// The error of parsing `text`, with its position.
std::pair<std::string, int> layout_error(const std::string& text) {
  try {
    hw::StageLayout::parse(text);
  } catch (const hw::LayoutError& e) {
    return {e.what(), e.position};
  }
  FAIL("no error for '" << text << "'");
  return {};
}

Schedule gen_with(const std::string& kind, int stages, int microbatches, const std::string& layout, int chunks = 1) {
  GenOptions o;
  o.stages = stages, o.microbatches = microbatches, o.chunks = chunks, o.layout = layout;
  return generate(kind, o);
}

hw::HardwareSetting llama8b() {
  hw::HardwareSetting s;
  s.model = hw::model_preset("llama3-8b");
  s.device = hw::device_preset("h100-sxm");
  s.network = hw::network_preset("nvlink8-ib400");
  s.seq = 2048;
  s.recompute = hw::Recompute::Full;
  return s;
}

hw::StepReport run_hw(Schedule s, const hw::HardwareSetting& hs) {
  s.header.cost_model = "hardware";
  s.header.hardware = hs;
  HardwareRun run = simulate_hardware(s);
  REQUIRE(run.result.ok);
  REQUIRE(run.report);
  return *run.report;
}

}  // namespace

TEST_CASE("stage layout: Megatron-LM's grammar unrolls to blocks per stage") {
  CHECK(blocks_of("Et*3|t*4|t*4|t*3L") == std::vector<int>{3, 4, 4, 3});
  // Megatron-LM's own examples (docs/api-guide/pipeline_parallel_layout.md and its parser's docstring), less 'm'.
  CHECK(blocks_of("Ett|(tt|)*6L") == std::vector<int>{2, 2, 2, 2, 2, 2, 2, 0});
  std::vector<int> deepseek(31, 2);  // "Et*3|(tt|)*29,m|L" without its MTP stage: 3, 29 stages of 2, the loss alone
  deepseek.front() = 3, deepseek.back() = 0;
  CHECK(blocks_of("Et*3|(tt|)*29,L") == deepseek);
  CHECK(blocks_of("E||t|L") == std::vector<int>{0, 0, 1, 0});  // empty stages are allowed
  CHECK(blocks_of("E,t*4|t*4,L") == std::vector<int>{4, 4});   // commas are cosmetic
  CHECK(blocks_of("EtttL") == std::vector<int>{3});
  CHECK(blocks_of("E(t|)*3tL") == std::vector<int>{1, 1, 1, 1});
  CHECK(blocks_of("E((t|)*2t*2|)*2L") == std::vector<int>{1, 1, 2, 1, 1, 2, 0});  // nesting (beyond Megatron)
  CHECK(blocks_of("E|*3tL") == std::vector<int>{0, 0, 0, 1});                      // '|*3' as Megatron's regex
  CHECK(blocks_of("Et*0|tL") == std::vector<int>{0, 1});
  // The canonical text round-trips.
  for (const char* text : {"Et*3|t*4|t*4|t*3L", "E|t*2|t*2|L", "EtL", "Et|t|tL", "E||t|L"}) {
    const hw::StageLayout l = hw::StageLayout::parse(text);
    CHECK(l.str() == text);
    CHECK(hw::StageLayout::parse(l.str()) == l);
  }
  CHECK(hw::StageLayout::parse("E(t*2|)*2t*2L").str() == "Et*2|t*2|t*2L");
  // Runs of three or more equal stages before the last are written as a group; the text reads back the same.
  std::vector<int> deep(64, 2);
  deep.front() = 1, deep.back() = 1;
  CHECK(hw::StageLayout(deep).str() == "Et|(t*2|)*62tL");
  CHECK(hw::StageLayout({2, 2, 2, 2}).str() == "E(t*2|)*3t*2L");
  CHECK(hw::StageLayout({0, 0, 0, 3}).str() == "E|||t*3L");
  for (const std::vector<int>& b : {deep, std::vector<int>{2, 2, 2, 2}, std::vector<int>{0, 0, 0, 3},
                                    std::vector<int>{1, 1, 1, 2, 2, 2, 0, 3, 3, 3, 3}})
    CHECK(hw::StageLayout::parse(hw::StageLayout(b).str()).blocks_per_layer() == b);
  const hw::StageLayout l = hw::StageLayout::parse("Et*3|t*4|t*4|t*3L");
  CHECK(l.layers() == 4);
  CHECK(l.blocks() == 14);
  const auto c = l.contents();
  REQUIRE(c.size() == 4);
  CHECK(c[0] == hw::LayerContent{0, 3, true, false});
  CHECK(c[1] == hw::LayerContent{3, 4, false, false});
  CHECK(c[3] == hw::LayerContent{11, 3, false, true});
}

TEST_CASE("stage layout: the even split is the hardware model's split without a layout") {
  for (int blocks : {1, 4, 7, 32, 126})
    for (int layers : {1, 2, 3, 4, 5, 8})
      if (layers <= blocks) {
        hw::ModelSpec m = hw::model_preset("llama3-8b");
        m.blocks = blocks;
        const auto even = hw::StageLayout::even(blocks, layers).contents();
        CHECK(hw::partition_layers(m, layers) == even);
        for (int i = 0; i < layers; ++i) {  // [i·B/L, (i+1)·B/L)
          CHECK(even[i].first_block == i * blocks / layers);
          CHECK(even[i].num_blocks == (i + 1) * blocks / layers - i * blocks / layers);
        }
      }
}

TEST_CASE("stage layout: bad strings are refused naming the position") {
  struct Bad {
    const char* text;
    int position;
    const char* says;
  };
  for (const Bad& b : std::initializer_list<Bad>{
           {"Et*3|t*4|tx|t*3L", 11, "unknown symbol 'x'"},
           {"t*4|t*4L", 1, "starts with E"},
           {"Et*4|t*4", 8, "ends with L"},
           {"Et*|tL", 3, "expected a repeat count after '*'"},
           {"E(t|t*2L", 2, "this '(' is not closed"},
           {"Et)|tL", 3, "a ')' without its '('"},
           {"Et*3|tEL", 7, "'E' (the embedding) is written once"},
           {"EtL|tL", 3, "'L' (the final norm, LM head and loss) is written once"},
           {"Et*3|(tt|)*29,m|L", 15, "'m' (a multi-token-prediction layer"},
           {"Et*3 |tL", 5, "a space"},
           {"E(t|)L", 2, "must be repeated"},
           {"E*2tL", 2, "without a repeat"},
           {"E*tL", 2, "without a repeat"},
           {"E(t*1000|)*1000000L", 2, "more than 1048576 blocks"},
           {"E((|)*1000)*2000L", 2, "more than 1048576 stages"},
           {"Et*99999999L", 4, "too large"},
           {"Et*|L", 3, "repeat count"},
           {"E", 1, "ends with L"},
       }) {
    INFO(b.text);
    const auto [what, position] = layout_error(b.text);
    CHECK(position == b.position);
    CHECK(what.find("position " + std::to_string(b.position) + ": ") == 0);
    CHECK(what.find(b.says) != std::string::npos);
  }
  CHECK(layout_error("").first.find("empty layout") != std::string::npos);
}

TEST_CASE("stage layout: the .sched header's layout line round-trips and is checked against the layers") {
  Schedule s = gen_with("1f1b", 4, 4, "Et*3|t*4|t*4|t*3L");
  REQUIRE(s.header.layout);
  CHECK(s.header.layout->blocks_per_layer() == std::vector<int>{3, 4, 4, 3});
  const std::string text = print_schedule(s);
  CHECK(text.find("stage_map 0 1 2 3\nlayout Et*3|t*4|t*4|t*3L\n") != std::string::npos);
  CHECK(text.find("trainsim-schedule 1\n") == 0);  // a version 1 file: the line needs no new version
  const Schedule back = parse_schedule(text, "l.sched");
  CHECK(back.header == s.header);
  CHECK(print_schedule(back) == text);
  // A layout written otherwise reads as the same layout and prints canonically.
  std::string other = text;
  other.replace(other.find("layout Et*3|t*4|t*4|t*3L"), 25, "layout E,ttt|(t*4|)*2,tttL");
  CHECK(print_schedule(parse_schedule(other, "l.sched")) == text);
  // Errors point at the line and the column of the character.
  auto error = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    try {
      parse_schedule(t, "l.sched");
    } catch (const ParseError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error("layout Et*3|t*4|t*4|t*3L", "layout Et*3|t*4|tx|t*3L") ==
        "l.sched:8:18: layout 'Et*3|t*4|tx|t*3L': position 11: unknown symbol 'x' (the layout is written with E, t, "
        "L, |, (...)*N, X*N and commas)");
  CHECK(error("layout Et*3|t*4|t*4|t*3L", "layout Et*3|t*4|t*7L").find(
            "l.sched:8:8: the layout has 3 stages but the schedule has 4 layers") == 0);
  CHECK(error("layout Et*3|t*4|t*4|t*3L", "layout Et*3|t*4|t*4|t*3L extra").find("l.sched:8:26: unexpected 'extra'") == 0);
  // Under the hardware model the layout's blocks must be the model's.
  std::string hw_text = text;
  hw_text.replace(hw_text.find("cost_model unit\n"), 16,
                  "cost_model hardware\n  model llama3-8b\n  device h100-sxm\n  network nvlink8-ib400\n");
  try {
    parse_schedule(hw_text, "h.sched");
    FAIL("no error");
  } catch (const ParseError& e) {
    CHECK(std::string(e.what()).find("the model has 32 blocks but the layout 'Et*3|t*4|t*4|t*3L' holds 14 (set "
                                     "blocks=14") != std::string::npos);
  }
  hw_text.replace(hw_text.find("model llama3-8b"), 15, "model llama3-8b blocks=14");
  const std::string canonical = print_schedule(parse_schedule(hw_text, "h.sched"));
  CHECK(canonical.find("  model llama3-8b blocks=14\n") != std::string::npos);
  CHECK(print_schedule(parse_schedule(canonical, "h.sched")) == canonical);
}

TEST_CASE("stage layout: every pipeline generator takes --layout, one stage per schedule layer") {
  for (const char* kind : {"gpipe", "1f1b", "zb-h1", "pp-fsdp"}) {
    INFO(kind);
    GenOptions o;
    o.stages = 3, o.microbatches = 3, o.layout = "Et|t*2|tL";
    CHECK(generate(kind, o).header.layout->blocks_per_layer() == std::vector<int>{1, 2, 1});
  }
  for (const char* kind : {"interleaved-1f1b", "looped-bfs", "interleaved-zb"}) {
    INFO(kind);
    GenOptions o;
    o.stages = 2, o.chunks = 2, o.microbatches = 4, o.layout = "Et|t*2|t*2|tL";
    CHECK(generate(kind, o).header.layout->layers() == 4);
  }
  for (const char* kind : {"zbv", "dualpipev"}) {
    INFO(kind);
    GenOptions o;
    o.stages = 2, o.microbatches = 4, o.layout = "Et|t*2|t*2|tL";
    CHECK(generate(kind, o).header.layout->layers() == 4);
  }
  // The kinds with --layers take theirs from the layout.
  GenOptions o;
  o.tp = 2, o.pp = 2, o.microbatches = 2, o.layout = "Et|t*3|t*3|tL";
  Schedule three_d = generate("3d", o);
  CHECK(three_d.header.layers == 4);
  CHECK(three_d.header.layout->blocks() == 8);
  GenOptions f;
  f.dp = 2, f.layout = "Et*2|t*2|t*2L";
  CHECK(generate("fsdp", f).header.layers == 3);
  // A layout whose stages are not the schedule's layers, or that cannot be read, is refused by name.
  GenOptions bad;
  bad.stages = 4, bad.layout = "Et*3|t*3L";
  CHECK_THROWS_WITH_AS(generate("1f1b", bad),
                       doctest::Contains("1f1b: --layout 'Et*3|t*3L' has 2 stages but the schedule has 4 layers"),
                       std::invalid_argument);
  bad.chunks = 2;
  CHECK_THROWS_WITH_AS(generate("interleaved-1f1b", bad), doctest::Contains("--stages x --chunks"),
                       std::invalid_argument);
  bad.layout = "Et*3|t*3";
  CHECK_THROWS_WITH_AS(generate("1f1b", bad), doctest::Contains("1f1b: --layout 'Et*3|t*3': position 8: a layout ends with L"),
                       std::invalid_argument);
  // The command line says the same, exit 2.
  CommandResult r = run_trainsim("gen 1f1b --stages 4 --layout 'Et*3|tx|t*3|tL'", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("position 7: unknown symbol 'x'") != std::string::npos);
  r = run_trainsim("gen 1f1b --stages 4 --microbatches 4 --layout 'Et*3|t*4|t*4|t*3L' --model llama3-8b --device "
                   "h100-sxm --network nvlink8-ib400 --sim",
                   true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("holds 14 blocks but the model 'llama3-8b' has 32 (set model.blocks=14") != std::string::npos);
}

TEST_CASE("stage layout: the hardware model's per-layer work follows the layout") {
  hw::HardwareSetting s = llama8b();
  const hw::StageLayout layout = hw::StageLayout::parse("Et*9|t*9|t*9|t*5L");
  const auto layers = hw::partition_layers(s.model, 4, &layout);
  const hw::ModelSpec& m = s.model;
  // Independent: 2 FLOPs per weight of a block's matrices, 4·s·h of attention per token and block, 2·h·V of head.
  const double tokens = s.tokens_per_microbatch(), h = m.hidden, f = m.ffn, kv = 1024, V = m.vocab;
  const double block_matrix = 2 * tokens * (h * (h + 2 * kv) + h * h + 3 * h * f);
  const double block_attention = 4 * tokens * s.seq_len() * h;
  const int expect[] = {9, 9, 9, 5};
  for (int l = 0; l < 4; ++l) {
    INFO("layer " << l);
    const hw::Work w = hw::compute_work(s, layers[l], OpKind::Forward, 1);
    CHECK(w.forward_flops == doctest::Approx(expect[l] * block_matrix + (l == 3 ? 2 * tokens * h * V : 0)).epsilon(1e-12));
    CHECK(w.attention_flops == doctest::Approx(expect[l] * block_attention).epsilon(1e-12));
  }
  // TensorSizes: a layer's parameters are its blocks', plus the embedding's or the head's.
  const hw::TensorSizes sizes(s, 4, &layout);
  CHECK(sizes.layer_parameters(1) == doctest::Approx(9 * m.block_parameters()));
  CHECK(sizes.layer_parameters(0) == doctest::Approx(9 * m.block_parameters() + m.embedding_parameters()));
  CHECK(sizes.layer_parameters(3) == doctest::Approx(5 * m.block_parameters() + m.head_parameters()));
  // Misfits are refused naming both counts.
  const hw::StageLayout short_layout = hw::StageLayout::parse("Et*3|t*3L");
  CHECK_THROWS_WITH_AS(hw::partition_layers(s.model, 2, &short_layout),
                       doctest::Contains("holds 6 blocks but the model 'llama3-8b' has 32"), hw::SpecError);
  CHECK_THROWS_WITH_AS(hw::partition_layers(s.model, 3, &layout), doctest::Contains("has 4 stages but the schedule has 3"),
                       hw::SpecError);
}

TEST_CASE("stage layout: fewer blocks on the LM head's stage lower the bubble and the step time, per-stage compute as "
          "the blocks say") {
  // llama3-8b, 1F1B over 4 stages: the LM head (2·h·V = 1.05 GFLOP per token) costs about two blocks, so the even
  // split's last stage is the slowest. Llama 3 (Dubey et al. 2024, §3.3.2) takes a layer off the first and the
  // last stages, and torchtitan does by default (job_config.py: pipeline_parallel_first/last_stage_less_layers
  // = 1, "the last stage has the extra overhead of the output layer"); balanced, the bubble comes down to
  // 1F1B's (p-1)/(m+p-1) = 3/11 (DESIGN §2).
  const hw::HardwareSetting s = llama8b();
  const hw::StepReport even = run_hw(gen_with("1f1b", 4, 8, ""), s);
  const hw::StepReport uneven = run_hw(gen_with("1f1b", 4, 8, "Et*9|t*9|t*9|t*5L"), s);
  MESSAGE("even: step " << even.step_time_s << " s, bubble " << even.bubble_fraction << "; Et*9|t*9|t*9|t*5L: step "
                        << uneven.step_time_s << " s, bubble " << uneven.bubble_fraction);
  // The even split: the last stage computes more than a middle one (8 blocks and the head against 8 blocks).
  CHECK(even.ranks[3].compute_s / even.ranks[1].compute_s > 1.15);
  CHECK(uneven.step_time_s < 0.95 * even.step_time_s);
  const double formula = 3.0 / 11;
  CHECK(even.bubble_fraction > formula + 0.05);
  CHECK(uneven.bubble_fraction < formula + 0.02);
  CHECK(uneven.bubble_fraction < even.bubble_fraction - 0.04);
  // Per stage, the compute follows the blocks: the three stages of 9 blocks alike (the embedding's gather is
  // memory traffic of a few MB), the head's stage of 5 blocks and the head less.
  CHECK(uneven.ranks[0].compute_s == doctest::Approx(uneven.ranks[1].compute_s).epsilon(0.01));
  CHECK(uneven.ranks[2].compute_s == doctest::Approx(uneven.ranks[1].compute_s).epsilon(1e-9));
  CHECK(uneven.ranks[3].compute_s < uneven.ranks[1].compute_s);
  CHECK(uneven.ranks[1].compute_s == doctest::Approx(9.0 / 8.0 * even.ranks[1].compute_s).epsilon(1e-2));
}

TEST_CASE("stage layout: tied embeddings on two stages keep a copy of the matrix on the last and all-reduce its grad") {
  hw::HardwareSetting s;
  s.model = hw::model_preset("gpt2-124m");  // tied: the LM head is the token embedding
  s.device = hw::device_preset("h100-sxm");
  s.network = hw::network_preset("nvlink8-ib400");
  REQUIRE(s.model.tied_embeddings);
  Schedule p = gen_with("1f1b", 4, 4, "Et*2|t*4|t*4|t*2L");
  p.header.cost_model = "hardware";
  p.header.hardware = s;
  auto model = make_schedule_cost_model(p);
  const auto& hwm = dynamic_cast<const hw::HardwareCostModel&>(*model);
  const double matrix = static_cast<double>(s.model.vocab) * s.model.hidden;
  CHECK(hwm.sizes().tied_copy());
  CHECK(hwm.sizes().layer_parameters(3) == doctest::Approx(2 * s.model.block_parameters() + s.model.head_parameters() + matrix));
  const Op* first_update = nullptr;
  const Op* last_update = nullptr;
  for (const Op& op : p.ranks[0]) if (op.kind == OpKind::Update) first_update = &op;
  for (const Op& op : p.ranks[3]) if (op.kind == OpKind::Update) last_update = &op;
  REQUIRE(first_update);
  REQUIRE(last_update);
  const double expect = hw::nccl_collective(hw::Collective::AllReduce, s.network.shape_of({0, 3}),
                                            matrix * s.model.grad_bytes, s.network)
                            .seconds;
  CHECK(expect > 0);
  CHECK(hwm.tied_embedding_seconds(*first_update) == doctest::Approx(expect));
  CHECK(hwm.tied_embedding_seconds(*last_update) == doctest::Approx(expect));
  Op middle = *first_update;
  middle.layer = 1;
  CHECK(hwm.tied_embedding_seconds(middle) == 0);
  // Untied, or with both ends on one rank (the V placement of ZBV), there is no copy and no all-reduce.
  p.header.hardware->model.tied_embeddings = false;
  auto untied = make_schedule_cost_model(p);
  CHECK_FALSE(dynamic_cast<const hw::HardwareCostModel&>(*untied).sizes().tied_copy());
  CHECK(dynamic_cast<const hw::HardwareCostModel&>(*untied).tied_embedding_seconds(*first_update) == 0);
  Schedule v = gen_with("zbv", 2, 4, "Et*3|t*3|t*3|t*3L");
  v.header.cost_model = "hardware";
  v.header.hardware = s;
  auto vm = make_schedule_cost_model(v);
  CHECK_FALSE(dynamic_cast<const hw::HardwareCostModel&>(*vm).sizes().tied_copy());
}

TEST_CASE("stage layout: the unit cost model charges a layer its share of the blocks") {
  Schedule s = gen_with("1f1b", 3, 2, "E|t*3|tL");
  auto model = make_schedule_cost_model(s);
  const auto& unit = dynamic_cast<const UnitCostModel&>(*model);
  CHECK(unit.per_batch(0) == 0);                        // the embedding alone
  CHECK(unit.per_batch(1) == 2'250'000'000);            // 3 stages x 3/4 of the blocks
  CHECK(unit.per_batch(2) == 750'000'000);
  SimResult r = simulate(s);
  REQUIRE(r.ok);
  // Without a layout: 1 s per stage and batch, as before.
  auto plain = make_schedule_cost_model(gen_with("1f1b", 3, 2, ""));
  CHECK(dynamic_cast<const UnitCostModel&>(*plain).per_batch(1) == 1'000'000'000);
}

TEST_CASE("stage layout: the executor replays uneven layouts as single-device training") {
  struct Case {
    const char* kind;
    int stages, chunks;
    const char* layout;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"1f1b", 3, 1, "Et|t*2|tL"},
           {"1f1b", 4, 1, "E|t*2|t*2|L"},  // the embedding and the head on stages of their own
           {"interleaved-1f1b", 2, 2, "Et*2|t|t|t*2L"},
           {"zb-h1", 2, 1, "Et*3|tL"},
       }) {
    INFO(c.kind << " " << c.layout);
    Schedule s = gen_with(c.kind, c.stages, 4, c.layout, c.chunks);
    exec::ReplayOptions o = tiny_options(s);
    o.model.blocks = s.header.layout->blocks();
    o.check = true;
    exec::ReplayResult r = exec::replay(s, o);
    INFO(r.error);
    CHECK(r.ok);
    CHECK(r.checked);
    CHECK(r.max_rel_diff_loss <= 1e-5);
    CHECK(r.max_rel_diff_weights <= 1e-5);
  }
  // A layout that does not fit the model, a layer with nothing to compute, a TP slice of a layer without blocks.
  Schedule s = gen_with("1f1b", 3, 2, "Et|t*2|tL");
  exec::ReplayOptions o = tiny_options(s);
  o.model.blocks = 5;
  exec::ReplayResult r = exec::replay(s, o);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("the layout 'Et|t*2|tL' holds 4 blocks but the model has 5 (try --blocks 4)") != std::string::npos);
  Schedule empty = gen_with("1f1b", 4, 2, "Et||t*2|tL");
  o = tiny_options(empty);
  o.model.blocks = 4;
  r = exec::replay(empty, o);
  CHECK(r.error.find("leaves layer 1 empty") != std::string::npos);
  GenOptions t;
  t.tp = 2, t.pp = 2, t.microbatches = 2, t.layout = "E|t*2L";
  Schedule tp = generate("3d", t);
  o = tiny_options(tp);
  o.model.blocks = 2;
  r = exec::replay(tp, o);
  CHECK(r.error.find("layer 0 holds no transformer block (only the embedding)") != std::string::npos);
}

TEST_CASE("stage layout: trainsim replay --check on an uneven layout from the command line") {
  auto dir = fresh_dir("stage-layout-replay");
  const std::string sched = (dir / "u.sched").string();
  REQUIRE(run_trainsim("gen 1f1b --stages 3 --microbatches 4 --layout 'Et*2|t*3|tL' -o " + sched).exit_code == 0);
  CommandResult r = run_trainsim("replay " + sched + " --model tiny --blocks 6 --steps 2 --check --json --data " +
                                 test_corpus());
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["ok"] == true);
  CHECK(j["max_rel_diff_loss"].get<double>() <= 1e-5);
  CHECK(j["max_rel_diff_weights"].get<double>() <= 1e-5);
}

TEST_CASE("stage layout: hostile layouts end with a clear error at once, not a crash or minutes of work (issue 38)") {
  // 50,000 nested groups: a depth error, not a stack overflow.
  std::string deep = "E" + std::string(50000, '(') + "t";
  for (int i = 0; i < 50000; ++i) deep += ")*1";
  deep += "L";
  try {
    (void)trainsim::hw::StageLayout::parse(deep);
    FAIL("a 50,000-deep layout was accepted");
  } catch (const trainsim::hw::LayoutError& e) {
    CHECK(std::string(e.what()).find("nested deeper than 64") != std::string::npos);
  }
  // Repeats of an empty group nest to 10^12 iterations unless one stage repeated is computed, not looped.
  const auto empty = trainsim::hw::StageLayout::parse("E((t*0)*1000000)*1000000|tL");
  CHECK(empty.layers() == 2);
  CHECK(empty.blocks() == 1);
  // A million stages of one block each: built in linear time (the limit is 1,048,576 stages).
  const auto wide = trainsim::hw::StageLayout::parse("E(t|)*1000000tL");
  CHECK(wide.layers() == 1000001);
  CHECK_THROWS_AS(trainsim::hw::StageLayout::parse("E(t|)*1048576tL"), trainsim::hw::LayoutError);
}

TEST_CASE("a long layout in an error is quoted in at most 80 bytes, an empty TP slice list is named") {
  // Issue 38: `gen --layout` echoed a 10 KB layout in full; "<+/4>" said "TP slices  are out of range".
  std::string layout = "E";
  for (int i = 0; i < 5000; ++i) layout += "t|";
  layout += "xL";
  const testing::CommandResult r = testing::run_trainsim("gen 1f1b --stages 4 --layout '" + layout + "' -o /dev/null", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("bytes in all)") != std::string::npos);
  CHECK(r.out.size() < 600);
  std::string why;
  try {
    parse_tensor("A0{0}<+/4>");
  } catch (const std::invalid_argument& e) {
    why = e.what();
  }
  CHECK(why == "expected TP slice numbers before '/' (<1/4>, <+0-3/4>) in 'A0{0}<+/4>'");
}
