// The LLM Training Puzzles: the eight of the original (srush/LLM-Training-Puzzles), with its configurations
// and targets, and two of ours, tensor parallelism (Megatron-LM) and expert parallelism (GShard, Megatron-Core
// MoE), whose targets come from their reference solutions. Each has a reference solution and a learner's exercise.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "puzzles/model.h"

namespace trainsim::puzzles {

/// A rank program: what every rank of a puzzle runs.
using Program = Task (*)(Model&);

/// One puzzle.
struct Puzzle {
  std::string name;        ///< command-line name: "basic", "grad_accum", ...
  std::string title;       ///< "Puzzle 0 - Standard Training"
  std::string goal;        ///< one-sentence statement of the task
  int ranks = 1;           ///< world size
  int layers = 1;
  int batches = 1;
  double target_time = 0;    ///< met when floor(Timesteps) <= target_time (steps)
  double target_memory = 0;  ///< met when the peak <= target_memory (puzzle units)
  Program reference = nullptr;
  Program exercise = nullptr;
  std::string exercise_file;  ///< where the learner writes the solution
  int tp = 1;  ///< TP degree: ranks form TP groups of `tp` consecutive ranks (Model::tp); 1 without TP
  /// EP degree: ranks form EP groups of `ep` consecutive ranks (Model::ep), every layer a Mixture-of-Experts
  /// layer; 1 without experts
  int ep = 1;
};

/// The puzzles: the original eight in the original order, then tensor parallelism (Puzzle 8) and expert
/// parallelism (Puzzle 9), additions.
const std::vector<Puzzle>& catalog();
/// The puzzle called `name`, or nullptr.
const Puzzle* find_puzzle(std::string_view name);

namespace reference {
Task basic(Model& model);
Task grad_accum(Model& model);
Task ddp(Model& model);
Task wsdp(Model& model);
Task fsdp(Model& model);
Task pipeline(Model& model);
Task gpipe(Model& model);
Task pipeline_fsdp(Model& model);
Task tensor_parallel(Model& model);
Task expert_parallel(Model& model);
}  // namespace reference

namespace exercises {
Task basic(Model& model);
Task grad_accum(Model& model);
Task ddp(Model& model);
Task wsdp(Model& model);
Task fsdp(Model& model);
Task pipeline(Model& model);
Task gpipe(Model& model);
Task pipeline_fsdp(Model& model);
Task tensor_parallel(Model& model);
Task expert_parallel(Model& model);
}  // namespace exercises

}  // namespace trainsim::puzzles
