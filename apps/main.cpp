// trainsim: distributed LLM training schedules. Thin front end: parses, calls the libraries.
#include <iostream>

#include <CLI/CLI.hpp>

#include "apps/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"trainsim: simulate, check and draw distributed LLM training schedules"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "trainsim 0.1.0");
  int exit_code = 0;
  trainsim::apps::add_puzzles_command(app, &exit_code);
  trainsim::apps::add_sim_commands(app, &exit_code);
  trainsim::apps::add_gen_command(app, &exit_code);
  trainsim::apps::add_convert_command(app, &exit_code);
  trainsim::apps::add_replay_command(app, &exit_code);
  trainsim::apps::add_calibrate_command(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints the help or the error
    return code == 0 ? 0 : 2;
  }
  return exit_code;
}
