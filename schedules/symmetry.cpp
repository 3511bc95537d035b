#include "schedules/symmetry.h"

#include <algorithm>
#include <functional>

#include "hardware/setting.h"

namespace trainsim {

std::optional<RankGrid> rank_grid(const std::string& kind, const GenOptions& o) {
  if (kind == "3d") return RankGrid{o.tp, o.cp, o.dp, o.pp, std::max(o.ep, 1), o.ep > 1 ? std::max(o.etp, 1) : 1};
  if (kind == "tp") return RankGrid{o.tp, 1, 1, 1};
  return std::nullopt;
}

std::vector<int> symmetric_mirror(const ScheduleHeader& h, const RankGrid& grid) {
  const long long world = grid.world();
  // The expert-slice classes of a stage: one under balanced routing (each slice computes 1/ep of its group's
  // tokens, its ops cost what slice 0's do), else one per slice, whose loads differ.
  const bool balanced = std::adjacent_find(h.expert_load.begin(), h.expert_load.end(), std::not_equal_to<>()) ==
                        h.expert_load.end();
  const int classes = grid.ep > 1 && !balanced ? grid.ep : 1;
  if (world != h.world_size || world <= 0 || world == static_cast<long long>(grid.pp) * classes) return {};
  const int etp = std::max(grid.etp, 1);
  if (classes > 1 && (grid.tp * grid.cp * grid.dp) % (classes * etp) != 0) return {};
  const int stride = grid.tp * grid.cp * grid.dp;  // ranks per stage
  const hw::NetworkSpec* net = h.hardware ? &h.hardware->network : nullptr;
  // Each rank's groups, in the header's order (group 0, every rank, is alike for all).
  std::vector<std::vector<int>> groups_of(world);
  for (std::size_t g = 0; g < h.groups.size(); ++g)
    for (int r : h.groups[g])
      if (r >= 0 && r < world) groups_of[r].push_back(static_cast<int>(g));
  std::vector<hw::GroupShape> shape(h.groups.size());
  if (net)
    for (std::size_t g = 0; g < h.groups.size(); ++g) shape[g] = net->shape_of(h.groups[g]);
  auto same_group = [&](int a, int b) {
    if (h.groups[a].size() != h.groups[b].size()) return false;
    if (!net) return true;
    const hw::GroupShape &x = shape[a], &y = shape[b];
    return x.ranks == y.ranks && x.nodes == y.nodes && x.ranks_per_node == y.ranks_per_node;
  };
  std::vector<int> mirror(world);
  for (int r = 0; r < world; ++r) {
    // (the lowest rank of the stage holding its slice (f / etp) mod ep, f the stage's index)
    const int s = r / stride, q = s * stride + ((r - s * stride) / etp) % classes * etp;
    mirror[r] = q;
    if (r == q) continue;
    if (groups_of[r].size() != groups_of[q].size()) return {};
    for (std::size_t k = 0; k < groups_of[r].size(); ++k)
      if (!same_group(groups_of[r][k], groups_of[q][k])) return {};
    if (net)
      for (int t = 0; t < grid.pp; ++t) {
        const int delta = (t - s) * stride;
        if ((net->node_of(r) == net->node_of(r + delta)) != (net->node_of(q) == net->node_of(q + delta))) return {};
      }
  }
  return mirror;
}

int simulated_ranks(const std::vector<int>& mirror, int world_size) {
  if (mirror.empty()) return world_size;
  int n = 0;
  for (int r = 0; r < static_cast<int>(mirror.size()); ++r) n += mirror[r] == r;
  return n;
}

}  // namespace trainsim
