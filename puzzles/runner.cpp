#include "puzzles/runner.h"

#include <cmath>
#include <memory>

namespace trainsim::puzzles {

PuzzleResult run_puzzle(const Puzzle& puzzle, bool exercise) {
  return run_program(puzzle, exercise ? puzzle.exercise : puzzle.reference);
}

PuzzleResult run_program(const Puzzle& puzzle, Program program) {
  PuzzleResult r;
  r.name = puzzle.name;
  r.target_time = puzzle.target_time;
  r.target_memory = puzzle.target_memory;

  PuzzleCostModel cost;
  WorldOptions opts;
  opts.world_size = puzzle.ranks;
  opts.layers = puzzle.layers;
  opts.batches = puzzle.batches;
  std::vector<std::unique_ptr<Model>> models;
  {
    World world(opts, cost);
    for (int rank = 0; rank < puzzle.ranks; ++rank) {
      models.push_back(std::make_unique<Model>(Rank(world, rank), puzzle.layers, puzzle.batches));
      world.spawn(rank, program(*models.back()));
    }
    try {
      world.run();
      std::vector<Model*> ptrs;
      for (auto& m : models) ptrs.push_back(m.get());
      Model::check(ptrs);
      r.correct = true;
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    r.trace = world.trace();
  }
  r.timesteps = r.trace.timesteps();
  r.makespan = r.trace.makespan();
  r.peak = r.trace.peak();
  r.time_ok = std::floor(to_seconds(r.timesteps)) <= puzzle.target_time;
  r.memory_ok = r.peak.memory <= puzzle.target_memory;
  return r;
}

}  // namespace trainsim::puzzles
