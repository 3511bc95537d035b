// trainsim: distributed LLM training schedules. Thin front end: parses, calls the libraries.
#include <iostream>
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
