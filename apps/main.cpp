// trainsim: distributed LLM training schedules. Thin front end: parses, calls the libraries.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "apps/suggest.h"
#include "apps/tune_allocator.h"

int main(int argc, char** argv) {
  trainsim::apps::tune_allocator();
  CLI::App app{"trainsim: simulate, check and draw distributed LLM training schedules"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "trainsim 0.1.0");
  app.footer(
      "Exit status (every command): 0 success; 1 it ran and what it checks failed (a schedule that does not parse, "
      "import or validate, a step over the device's memory on the hardware cost model unless --allow-oom, a puzzle "
      "off its targets, a replay or its --check that failed); 2 it could not start or "
      "finish: a bad option, an input that cannot be read (no such file or puzzle), an output that cannot be "
      "written. `trainsim launch` exits with the code of the first rank that failed.");
  int exit_code = 0;
  trainsim::apps::add_puzzles_command(app, &exit_code);
  trainsim::apps::add_sim_commands(app, &exit_code);
  trainsim::apps::add_gen_command(app, &exit_code);
  trainsim::apps::add_plan_command(app, &exit_code);
  trainsim::apps::add_convert_command(app, &exit_code);
  trainsim::apps::add_replay_command(app, &exit_code);
  trainsim::apps::add_launch_command(app, &exit_code);
  trainsim::apps::add_calibrate_command(app, &exit_code);
  trainsim::apps::add_model_commands(app, &exit_code);
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
    // The error naming the sub-command, with the closest option or sub-command for a mistyped one. The words as
    // typed, "--" included (launch's command starts after it).
    const std::vector<std::string> words(argv + 1, argv + argc);
    for (const auto& line : trainsim::apps::parse_error_lines(app, words, e)) std::cerr << line << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    // What a command could not finish for want of memory (a huge input, a simulation too large for the
    // machine): a message naming the command, not std::terminate.
    std::cerr << trainsim::apps::command_path(app, std::vector<std::string>(argv + 1, argv + argc))
              << ": out of memory: the machine cannot hold what this command needs\n";
    return 2;
  } catch (const std::exception& e) {
    // Commands report their own errors; anything that still escapes one is named, not an abort.
    std::cerr << trainsim::apps::command_path(app, std::vector<std::string>(argv + 1, argv + argc))
              << ": internal error: " << e.what() << "\n";
    return 2;
  }
  // Output that was lost is a failure (exit 2), whichever command wrote it (`trainsim sim --json > /dev/full`):
  // stdout's error flag is sticky, so a write that failed earlier is seen here too.
  errno = 0;
  std::cout.flush();  // (through stdio: a failure here sets errno and stdout's error flag)
  const bool flushed = std::fflush(stdout) == 0;
  if (!flushed || std::ferror(stdout) || !std::cout.good()) {
    const int err = errno;
    std::cerr << trainsim::apps::command_path(app, std::vector<std::string>(argv + 1, argv + argc))
              << ": standard output could not be written" << (err != 0 ? std::string(" (") + std::strerror(err) + ")" : "")
              << "; what it printed is lost\n";
    return 2;
  }
  return exit_code;
}
