// `trainsim convert IN OUT`: between a .sched schedule and PyTorch pipelining's schedule CSV (docs/pytorch-csv.md),
// and from a .sched schedule to Chakra execution traces and back (docs/chakra.md).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "apps/commands.h"
#include "apps/number_check.h"
#include "apps/schedule_input.h"
#include "apps/text_file.h"
#include "schedules/input.h"
#include "schedules/limits.h"
#include "interop/chakra.h"
#include "interop/pytorch_csv.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

namespace trainsim::apps {

namespace {

struct ConvertArgs {
  std::string in;
  std::string out;
  std::string form;        // "" = not given
  int microbatches = 0;    // 0 = not given
  std::string stage_map;   // "" = not given
  CLI::Option* microbatches_opt = nullptr;
};

constexpr const char* kCmd = "trainsim convert";

// Exit status (README): 2 when the conversion cannot start or finish (a bad option, an input that cannot be
// read, a schedule the CSV cannot hold, an output that cannot be written), 1 when the input was read and is wrong
// (it does not parse, import or validate, or does not fit --stage-map or --microbatches).
int fail(const std::string& what, int code = 2) {
  fmt::print(stderr, "{}: {}\n", kCmd, what);
  return code;
}

// Reads the .sched input into `s`; on failure returns the exit status, having said why (2: it cannot be read, 1:
// it does not parse).
std::optional<int> read_sched(const ConvertArgs& a, Schedule& s) {
  try {
    check_readable(a.in);
    s = read_schedule_file(a.in);
  } catch (const UnreadableInput& e) {
    return fail(e.what());
  } catch (const ParseError& e) {
    return fail(e.what(), 1);
  }
  return std::nullopt;
}

// The CSV-only options given with a Chakra conversion: the exit status of refusing them, else nullopt.
std::optional<int> refuse_csv_options(const ConvertArgs& a) {
  if (!a.form.empty() || !a.stage_map.empty() || (a.microbatches_opt && a.microbatches_opt->count() > 0))
    return fail("--form, --stage-map and --microbatches apply to PyTorch CSVs, not to Chakra traces");
  return std::nullopt;
}

int to_csv(const ConvertArgs& a) {
  if (a.microbatches_opt && a.microbatches_opt->count() > 0)
    return fail("--microbatches applies when reading a .csv (a .sched file states its microbatches)");
  CsvForm form = CsvForm::ComputeOnly;
  if (a.form == "comms") form = CsvForm::ComputeComms;
  else if (!a.form.empty() && a.form != "compute")
    return fail(fmt::format("--form is compute or comms, not '{}'", a.form));
  Schedule s;
  if (auto code = read_sched(a, s)) return *code;
  try {
    if (!a.stage_map.empty()) s.header.stage_map = parse_stage_map(a.stage_map, s.header.world_size, s.header.layers);
  } catch (const std::invalid_argument& e) {  // a map that does not fit the schedule
    return fail(fmt::format("{}: {}", a.in, e.what()), 1);
  }
  std::string csv;
  try {
    csv = export_pytorch_csv(s, form);
  } catch (const std::invalid_argument& e) {
    return fail(fmt::format("{}: a PyTorch pipelining CSV cannot hold this schedule: {}", a.in, e.what()));
  }
  if (std::string why = write_text_file_error(a.out, csv); !why.empty())
    return fail(fmt::format("cannot write '{}': {}", a.out, why));
  fmt::print("wrote {}: {} CSV, {} rank{}, {} stage{}\n", a.out, form == CsvForm::ComputeOnly ? "compute-only" : "compute+comms",
             s.header.world_size, s.header.world_size == 1 ? "" : "s", s.header.layers, s.header.layers == 1 ? "" : "s");
  return 0;
}

int to_sched(const ConvertArgs& a) {
  if (!a.form.empty())
    return fail("--form applies when writing a .csv; the form of a CSV being read follows from its cells");
  if (a.microbatches_opt && a.microbatches_opt->count() > 0 && a.microbatches < 1)
    return fail(fmt::format("--microbatches must be at least 1, got {}", a.microbatches));
  std::string csv;
  try {
    check_readable(a.in);
    csv = read_input_file(a.in);
  } catch (const UnreadableInput& e) {
    return fail(e.what());
  } catch (const std::invalid_argument& e) {  // larger than the limit
    return fail(e.what(), 1);
  }
  std::vector<int> map;
  if (!a.stage_map.empty()) {
    int world = 0, stages = 0;
    csv_shape(csv, world, stages);
    if (world == 0 || stages == 0) return fail(fmt::format("{}: the CSV has no actions", a.in), 1);
    try {
      map = parse_stage_map(a.stage_map, world, stages);
    } catch (const std::invalid_argument& e) {  // a map that does not fit the CSV
      return fail(fmt::format("{}: {}", a.in, e.what()), 1);
    }
  }
  Schedule s;
  try {
    s = import_pytorch_csv(csv, a.microbatches, map, a.in);
  } catch (const std::invalid_argument& e) {
    return fail(e.what(), 1);
  }
  if (std::string why = write_text_file_error(a.out, print_schedule(s)); !why.empty())
    return fail(fmt::format("cannot write '{}': {}", a.out, why));
  const ScheduleHeader& h = s.header;
  std::string what = fmt::format("{} rank{}, {} stage{}, {} microbatch{}, {} ops", h.world_size, h.world_size == 1 ? "" : "s",
                                 h.layers, h.layers == 1 ? "" : "s", h.microbatches, h.microbatches == 1 ? "" : "es",
                                 s.op_count());
  SimResult r = simulate(s);
  if (!r.ok) {
    fmt::print("wrote {}: {}\n", a.out, what);
    fmt::print(stderr, "{}: the schedule does not validate: {}\n", kCmd, r.error);
    return 1;
  }
  fmt::print("wrote {}: {}; it validates (unit costs: makespan {:g}, bubble {:.1f}%)\n", a.out, what,
             to_seconds(r.trace.makespan()), 100 * r.trace.bubble_fraction());
  return 0;
}

int to_chakra(const ConvertArgs& a) {
  if (auto code = refuse_csv_options(a)) return *code;
  Schedule s;
  if (auto code = read_sched(a, s)) return *code;
  std::vector<ChakraRank> ranks;
  try {
    ranks = chakra_trace(s);
  } catch (const std::invalid_argument& e) {  // a schedule that does not validate
    return fail(fmt::format("{}: {}", a.in, e.what()), 1);
  }
  std::size_t nodes = 0;
  for (int r = 0; r < s.header.world_size; ++r) {
    const std::string path = chakra_rank_path(a.out, r);
    if (std::string why = write_text_file_error(path, chakra_file_bytes(ranks[r])); !why.empty())
      return fail(fmt::format("cannot write '{}': {}", path, why));
    nodes += ranks[r].nodes.size();
  }
  const std::string groups = chakra_comm_groups_path(a.out);
  if (std::string why = write_text_file_error(groups, chakra_comm_groups_json(s.header)); !why.empty())
    return fail(fmt::format("cannot write '{}': {}", groups, why));
  fmt::print("wrote {} .. {}: Chakra execution traces (schema {}), {} rank{}, {} nodes; communicator groups in {}\n",
             chakra_rank_path(a.out, 0), chakra_rank_path(a.out, s.header.world_size - 1), kChakraSchemaVersion,
             s.header.world_size, s.header.world_size == 1 ? "" : "s", nodes, groups);
  return 0;
}

int from_chakra(const ConvertArgs& a) {
  if (auto code = refuse_csv_options(a)) return *code;
  std::vector<ChakraRank> ranks;
  std::vector<std::string> names;
  const bool json = extension(a.out) == ".json";
  try {
    // Rank 0's file names the world size; PREFIX.0.et, PREFIX.1.et, ... up to it.
    int world = 1;
    for (int r = 0; r < world; ++r) {
      const std::string path = chakra_rank_path(a.in, r);
      check_readable(path);
      ranks.push_back(parse_chakra_file(read_input_file(path), path, static_cast<std::size_t>(kMaxRankOps)));
      names.push_back(path);
      if (r == 0) world = chakra_world_size(ranks[0], path);
    }
  } catch (const UnreadableInput& e) {
    return fail(e.what());
  } catch (const ChakraError& e) {
    return fail(e.what(), 1);
  } catch (const std::invalid_argument& e) {  // larger than the read limit
    return fail(e.what(), 1);
  }
  if (json) {  // every rank's messages as protobuf's JSON mapping prints them (chakra_jsonizer's form)
    std::string out;
    try {
      out = chakra_json(ranks, names);
    } catch (const std::runtime_error& e) {
      return fail(e.what(), 1);
    }
    if (std::string why = write_text_file_error(a.out, out); !why.empty())
      return fail(fmt::format("cannot write '{}': {}", a.out, why));
    fmt::print("wrote {}: {} rank{} of Chakra nodes as JSON\n", a.out, ranks.size(), ranks.size() == 1 ? "" : "s");
    return 0;
  }
  Schedule s;
  try {
    s = schedule_from_chakra(ranks, names);
  } catch (const ChakraError& e) {
    return fail(e.what(), 1);
  }
  if (std::string why = write_text_file_error(a.out, print_schedule(s)); !why.empty())
    return fail(fmt::format("cannot write '{}': {}", a.out, why));
  const SimResult r = simulate(s);
  if (!r.ok) {
    fmt::print("wrote {}: {} ops of {} ranks\n", a.out, s.op_count(), s.header.world_size);
    fmt::print(stderr, "{}: the schedule does not validate: {}\n", kCmd, r.error);
    return 1;
  }
  fmt::print("wrote {}: {} ops of {} ranks; it validates (makespan {:g} s)\n", a.out, s.op_count(),
             s.header.world_size, to_seconds(r.trace.makespan()));
  return 0;
}

int run(const ConvertArgs& a) {
  const std::string ei = extension(a.in), eo = extension(a.out);
  if (ei == ".sched" && eo == ".csv") return to_csv(a);
  if (ei == ".csv" && eo == ".sched") return to_sched(a);
  if (ei == ".sched" && eo == ".et") return to_chakra(a);
  if (ei == ".et" && (eo == ".sched" || eo == ".json")) return from_chakra(a);
  return fail(fmt::format("converts a .sched file to a .csv file or to Chakra traces (PREFIX.et) and back; the "
                          "direction follows the extensions, got '{}' -> '{}'",
                          a.in, a.out));
}

}  // namespace

void add_convert_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Convert between a .sched schedule and PyTorch pipelining's schedule CSV (one row per rank, one action per "
      "cell: 0F1, 1B0, 0I1, 0W1, 1SEND_F0, 0RECV_B2, 0UNSHARD, 0RESHARD, 0REDUCE_GRAD), or Chakra execution traces "
      "(OUT named PREFIX.et: PREFIX.0.et, PREFIX.1.et, ... one per rank, and PREFIX.comm_groups.json; read back with "
      "IN named PREFIX.et; PREFIX.et -> NAME.json prints the nodes; docs/chakra.md). The direction follows the "
      "file extensions. Reading a CSV adds what makes the schedule run (loads, sends and receives for a compute-only "
      "CSV, the loss, frees, grad accumulation, one update per stage) and checks it in the simulator. Exit status: 0 "
      "converted (and, for a CSV, valid); 1 the input does not parse, import or validate, or does not fit "
      "--stage-map or --microbatches; 2 the conversion cannot start or finish: a bad option, an input that cannot "
      "be read, a schedule a CSV cannot hold, an output that cannot be written.");
  cmd->add_option("IN", args->in, "Input file: .sched, .csv or PREFIX.et (Chakra traces)")->required();
  cmd->add_option("OUT", args->out, "Output file: .csv, .sched, PREFIX.et (Chakra traces) or .json (from .et)")
      ->required();
  cmd->add_option("--form", args->form,
                  "Writing a CSV: 'compute' (F, B, I, W only; the default) or 'comms' (also SEND_F/RECV_F/SEND_B/RECV_B, "
                  "UNSHARD, RESHARD, REDUCE_GRAD)");
  args->microbatches_opt = cmd->add_option("--microbatches", args->microbatches,
                                           "Reading a CSV: number of microbatches (default: 1 + the largest microbatch index)")
                              ->check(integer_in(1, kMaxCount, "", "N>=1"));
  cmd->add_option("--stage-map", args->stage_map,
                  "Rank of each stage: '0,1,2,3', 'loop' (stage s on rank s % ranks) or 'v' (stage s on rank s, then "
                  "2*ranks-1-s). Reading a CSV, the default infers it from the rows (loop or V style only); writing one, "
                  "it replaces the schedule's stage_map")
      ->check(stage_map_check());
  cmd->callback([args, exit_code] { *exit_code = run(*args); });
}

}  // namespace trainsim::apps
