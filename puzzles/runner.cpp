#include "puzzles/runner.h"

#include <cmath>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "schedules/recorder.h"
#include "sim/ledger.h"

namespace trainsim::puzzles {

PuzzleResult run_puzzle(const Puzzle& puzzle, bool exercise, bool record) {
  return run_program(puzzle, exercise ? puzzle.exercise : puzzle.reference, record);
}

namespace {
// The rank of each layer's stage when exactly one rank runs each layer's forward; empty otherwise.
std::vector<int> stage_map_of(const Schedule& s) {
  std::vector<std::set<int>> owners(s.header.layers);
  for (const auto& ops : s.ranks)
    for (const Op& op : ops)
      if (op.kind == OpKind::Forward) owners.at(op.layer).insert(op.rank);
  std::vector<int> map;
  for (const auto& o : owners) {
    if (o.size() != 1) return {};
    map.push_back(*o.begin());
  }
  return map;
}
}  // namespace

PuzzleResult run_program(const Puzzle& puzzle, Program program, bool record) {
  PuzzleResult r;
  r.name = puzzle.name;
  r.target_time = puzzle.target_time;
  r.target_memory = puzzle.target_memory;

  PuzzleCostModel cost;
  WorldOptions opts;
  opts.world_size = puzzle.ranks;
  opts.layers = puzzle.layers;
  opts.batches = puzzle.batches;
  ScheduleHeader header;
  header.world_size = puzzle.ranks;
  header.layers = puzzle.layers;
  header.microbatches = puzzle.batches;
  header.cost_model = cost.name();
  header.p2p = opts.p2p;
  // Tensor parallelism: TP groups of `tp` consecutive ranks, groups 1, 2, ... named tp0, tp1, ... (a version 2
  // schedule: the TP tensors and group names need it); expert parallelism: EP groups of `ep` consecutive ranks,
  // ep0, ep1, ... (version 3). A puzzle has one or the other (Model's constructor refuses both).
  std::vector<std::vector<int>> tp_groups;  // (the TP or the EP groups)
  const int degree = puzzle.tp > 1 ? puzzle.tp : puzzle.ep;
  if (degree > 1) {
    const char* prefix = puzzle.tp > 1 ? "tp" : "ep";
    for (int first = 0; first + degree <= puzzle.ranks; first += degree) {
      std::vector<int> members(static_cast<std::size_t>(degree));
      for (int i = 0; i < degree; ++i) members[i] = first + i;
      header.group_names.push_back(fmt::format("{}{}", prefix, tp_groups.size()));
      tp_groups.push_back(std::move(members));
    }
    header.groups = tp_groups;
    header.version = puzzle.tp > 1 ? 2 : 3;
  }
  ScheduleRecorder recorder(header);
  std::vector<std::unique_ptr<Model>> models;
  // Each rank's highest memory sample so far (first strictly highest, as Trace::peak) with what was resident
  // then and the op that started: the peak's explanation.
  std::vector<double> best(static_cast<std::size_t>(puzzle.ranks), 0.0);
  std::vector<std::vector<Tensor>> best_resident(best.size());
  std::vector<std::string> best_op(best.size());
  {
    World world(opts, cost);
    for (const auto& g : tp_groups) world.add_group(g);
    world.set_op_observer([&](const Op& op) {
      if (record) recorder.on_op(op);
      if (!is_timed(op.kind)) return;
      const MemoryLedger& ledger = world.ledger(op.rank);
      if (ledger.total() <= best[op.rank]) return;
      best[op.rank] = ledger.total();
      best_resident[op.rank] = ledger.resident();
      best_op[op.rank] = op.describe() + (op.where.empty() ? "" : " (" + op.where + ")");
    });
    for (int rank = 0; rank < puzzle.ranks; ++rank) {
      models.push_back(std::make_unique<Model>(Rank(world, rank), puzzle.layers, puzzle.batches, puzzle.tp, puzzle.ep));
      if (record)
        models.back()->set_store_observer(
            [&recorder, rank](const Tensor* before, const Tensor* after) { recorder.on_store(rank, before, after); });
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
    for (const auto& b : world.blocked_ranks()) r.blocked.push_back({b.rank, b.since, b.what()});
  }
  if (record) {
    r.schedule = recorder.finish();
    r.schedule->header.stage_map = stage_map_of(*r.schedule);
  }
  r.timesteps = r.trace.timesteps();
  r.makespan = r.trace.makespan();
  r.peak = r.trace.peak();
  if (r.peak.memory > 0) {
    for (const Tensor& t : best_resident[r.peak.rank]) r.peak_resident.push_back(
          ResidentTensor{t.str(), static_cast<const CostModel&>(cost).memory(t, r.peak.rank)});
    r.peak_op = best_op[r.peak.rank];
  }
  r.time_ok = std::floor(to_seconds(r.timesteps)) <= puzzle.target_time;
  r.memory_ok = r.peak.memory <= puzzle.target_memory;
  return r;
}

}  // namespace trainsim::puzzles
