// trainsim: distributed LLM training schedules. Thin front end: parses, calls the libraries.
#include <climits>
#include <iostream>
#include <string>
#include <vector>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "apps/suggest.h"

namespace {

// glibc's allocator, tuned for a process that builds one large in-memory schedule and keeps it: freed memory
// stays in the heap for the next allocation instead of going back to the kernel, the heap grows in 256 MiB
// steps, and only blocks of 32 MiB and more are mapped on their own. Without it, `gen pp-fsdp --stages 16
// --dp 1024 --microbatches 64 --sim` spent two thirds of its time in the kernel faulting pages it had freed
// and asked for again (bench/README.md). Untouched pages of the heap cost no resident memory.
void tune_allocator() {
#ifdef __GLIBC__
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  mallopt(M_TOP_PAD, 256 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  tune_allocator();
  CLI::App app{"trainsim: simulate, check and draw distributed LLM training schedules"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "trainsim 0.1.0");
  int exit_code = 0;
  trainsim::apps::add_puzzles_command(app, &exit_code);
  trainsim::apps::add_sim_commands(app, &exit_code);
  trainsim::apps::add_gen_command(app, &exit_code);
  trainsim::apps::add_convert_command(app, &exit_code);
  trainsim::apps::add_replay_command(app, &exit_code);
  trainsim::apps::add_launch_command(app, &exit_code);
  trainsim::apps::add_calibrate_command(app, &exit_code);
  // `trainsim launch [OPTIONS] -- COMMAND ...`: CLI11 hands what follows "--" to positionals, which launch
  // has none of (its command is everything from the first word that is not an option); drop that "--".
  std::vector<char*> args(argv, argv + argc);
  if (argc > 2 && std::string(argv[1]) == "launch")
    for (std::size_t i = 2; i < args.size(); ++i)
      if (std::string(args[i]) == "--") {
        args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
    // The error, naming the sub-command; for a mistyped flag, the closest option of that sub-command.
    const std::vector<std::string> words(args.begin() + 1, args.end());
    const std::string path = trainsim::apps::command_path(app, words);
    std::cerr << path << ": " << e.what() << "\n";
    for (const auto& hint : trainsim::apps::unknown_option_hints(app, words)) std::cerr << path << ": " << hint << "\n";
    std::cerr << "Run `" << path << " --help` for the options.\n";
    return 2;
  }
  return exit_code;
}
