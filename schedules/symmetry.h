// Symmetric simulation (issue 34): a homogeneous 3D schedule runs the same program on every DP replica, TP
// member and CP member of a pipeline stage, so simulating one representative of each class (the stage's lowest
// rank: TP, CP and DP index 0), with every collective timed for its whole group, gives the full simulation's
// figures exactly: step time, bubble, exposed communication and every rank's peak memory (tests/test_symmetry.cpp
// compares the two to the last bit). docs/planning.md, "Symmetry".
//
// The programs are alike by construction of the generators that name a grid (rank_grid): rank (t, c, d, s)
// runs rank (0, 0, 0, s)'s ops with its own TP, CP and DP groups and the same stages' ranks as peers (with expert
// parallelism, on its own expert slice: alike when routing is balanced, else rank (0, 0, d mod ep, s)'s). What can
// still differ is where the ranks sit: a group spread over two nodes where its representative's sits in one, or a
// message that crosses nodes where the representative's does not. symmetric_mirror checks both on the schedule's
// network and gives no map (simulate every rank) when any class is not alike.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "schedules/generators.h"
#include "schedules/schedule.h"

namespace trainsim {

/// The ranks of a 3D schedule as a grid: rank = t + T·(c + C·(d + D·s)) for TP index t < T, CP index c < C,
/// DP index d < D and stage s < P (gen 3d's order, schedules/generators.h).
struct RankGrid {
  int tp = 1, cp = 1, dp = 1, pp = 1;
  /// Expert parallelism (gen 3d --ep): EP groups of `ep` consecutive ranks of a stage's TP x CP x DP ranks (TP
  /// fastest: index f = tp index + T·(cp index + C·d)), index f holding expert slice f mod ep. 1: no expert slices.
  int ep = 1;
  /// Expert tensor parallelism (gen 3d --etp): 1, or the TP degree; index f then holds expert slice (f / etp) mod ep.
  int etp = 1;
  /// T·C·D·P ranks.
  long long world() const { return static_cast<long long>(tp) * cp * dp * pp; }
};

/// The grid of the schedule generator `kind` makes from `options`, for the kinds whose ranks of one stage run
/// alike by construction: 3d (tp × cp × dp × pp) and tp (tp ranks of one stage); none for the others.
std::optional<RankGrid> rank_grid(const std::string& kind, const GenOptions& options);

/// The map SimOptions::mirror takes for a schedule with header `h` whose ranks lie on `grid`: each rank's
/// representative, the lowest rank of its stage. With expert slices (grid.ep > 1) under balanced routing (the
/// header's expert_load empty or all equal) every slice runs alike, the stage's lowest rank stands for all; under
/// imbalance the lowest rank of the stage that holds the same slice does (ep classes a stage). Empty when the simulation must run every rank: the header's world
/// size is not the grid's, a class has only one rank, or some rank's groups (in the header's order) differ from
/// its representative's in size or, with the hardware cost model, in where their members sit (GroupShape on the
/// header's network), or a rank and a rank of another stage sit on one node where their representatives do not
/// (or the other way round).
std::vector<int> symmetric_mirror(const ScheduleHeader& h, const RankGrid& grid);

/// The ranks a simulation with `mirror` runs among `world_size`: those that are their own representative, or every
/// rank when the map is empty.
int simulated_ranks(const std::vector<int>& mirror, int world_size);

}  // namespace trainsim
