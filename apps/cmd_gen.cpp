// `trainsim gen KIND ... -o FILE`: write a generated schedule (schedules/generators.h) as .sched text.
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "apps/commands.h"
#include "apps/text_file.h"
#include "schedules/generators.h"
#include "schedules/text_format.h"

namespace trainsim::apps {

namespace {

struct GenArgs {
  std::string kind;
  GenOptions options;
  bool no_reshard = false;
  std::string out = "-";
};

std::string kind_list() {
  std::string s;
  for (const auto& k : generator_kinds()) s += (s.empty() ? "" : ", ") + k;
  return s;
}

int run(const GenArgs& a) {
  bool known = false;
  for (const auto& k : generator_kinds()) known = known || k == a.kind;
  if (!known) {
    fmt::print(stderr, "trainsim gen: unknown kind '{}' (the kinds are: {})\n", a.kind, kind_list());
    return 2;
  }
  GenOptions opts = a.options;
  opts.reshard_after_forward = !a.no_reshard;
  Schedule s;
  try {
    s = generate(a.kind, opts);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "trainsim gen: {}\n", e.what());
    return 2;
  }
  std::string text = print_schedule(s);
  if (a.out == "-") {
    std::cout << text;
    std::cout.flush();
    return std::cout ? 0 : 2;
  }
  if (!write_text_file(a.out, text)) {
    fmt::print(stderr, "trainsim gen: cannot write '{}'\n", a.out);
    return 2;
  }
  return 0;
}

}  // namespace

void add_gen_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<GenArgs>();
  CLI::App* cmd = app.add_subcommand(
      "gen",
      "Generate a schedule and write it as .sched text (unit cost model, per-pair channels). Kinds: pipelines "
      "gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1 (--stages, --microbatches, --chunks); data parallel "
      "ddp, zero1, zero2, fsdp (--dp ranks, --layers, --microbatches per rank, --prefetch, "
      "--no-reshard-after-forward); pipeline + FSDP pp-fsdp (--stages, --dp replicas, --microbatches per "
      "replica). Exits 2 on bad options.");
  cmd->add_option("kind", args->kind, "What to generate: one of " + kind_list())->required();
  cmd->add_option("--stages", args->options.stages, "Pipeline stages (pipeline kinds, pp-fsdp)")->capture_default_str();
  cmd->add_option("--microbatches", args->options.microbatches,
                  "Microbatches of the step (pipelines); per rank (ddp, zero1, zero2, fsdp); per replica (pp-fsdp)")
      ->capture_default_str();
  cmd->add_option("--chunks", args->options.chunks, "Model chunks per rank (interleaved-1f1b, looped-bfs)")
      ->capture_default_str();
  cmd->add_option("--layers", args->options.layers, "Model layers of the data-parallel kinds (0: 4)")->capture_default_str();
  cmd->add_option("--dp", args->options.dp, "Data-parallel degree: ranks (ddp, zero1, zero2, fsdp), replicas (pp-fsdp)")
      ->capture_default_str();
  cmd->add_option("--prefetch", args->options.prefetch, "fsdp: how many layers ahead each all-gather is issued")
      ->capture_default_str();
  cmd->add_flag("--no-reshard-after-forward", args->no_reshard,
                "fsdp: keep each gathered weight from its forward until its backward");
  cmd->add_option("-o,--output", args->out, "Output file, or - for standard output")->capture_default_str();
  cmd->callback([args, exit_code] { *exit_code = run(*args); });
}

}  // namespace trainsim::apps
