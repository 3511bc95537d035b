// Sub-commands of the trainsim program. Each registers its options on the CLI11 app and returns the exit
// code through `*exit_code` when it runs.
#pragma once

#include <CLI/CLI.hpp>

namespace trainsim::apps {

/// `trainsim puzzles`: runs the ten puzzles (the original eight, tensor and expert parallelism), prints a table (or JSON) and writes a timeline per puzzle.
void add_puzzles_command(CLI::App& app, int* exit_code);
/// `trainsim validate FILE` and `trainsim sim FILE ...`: check and time a schedule, write its timeline,
/// Perfetto trace and dependency graph.
void add_sim_commands(CLI::App& app, int* exit_code);
/// `trainsim gen KIND ... -o FILE`: write a generated schedule.
void add_gen_command(CLI::App& app, int* exit_code);
/// `trainsim plan --model M --gpus N --global-batch B ...`: search the configurations of a training run.
void add_plan_command(CLI::App& app, int* exit_code);
/// `trainsim convert IN OUT`: between .sched and PyTorch pipelining CSV.
void add_convert_command(CLI::App& app, int* exit_code);

/// `trainsim calibrate TRACE... -o DEVICE.json`: fit a device description to measured replay traces.
void add_calibrate_command(CLI::App& app, int* exit_code);

/// `trainsim replay FILE ...`: train the executor's model by replaying a schedule (exec/).
void add_replay_command(CLI::App& app, int* exit_code);
/// `trainsim sample --checkpoint DIR` and `trainsim export --checkpoint DIR -o DIR2`: use a trained model.
void add_model_commands(CLI::App& app, int* exit_code);
/// `trainsim launch --nproc N -- COMMAND ...`: N local processes of a command, one per rank (torchrun's variables).
void add_launch_command(CLI::App& app, int* exit_code);

}  // namespace trainsim::apps
