#include "schedules/cost_models.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "hardware/cost_model.h"

namespace trainsim {

std::unique_ptr<CostModel> make_schedule_cost_model(const Schedule& s) {
  const ScheduleHeader& h = s.header;
  if (h.cost_model == "unit") {
    // Layers are equal shares of the model; a pipeline stage's share (the layers of one rank of the stage
    // map) costs one second per batch, so a chunk of v per stage costs 1/v (sim/cost_model.h).
    if (h.stage_map.empty()) return std::make_unique<UnitCostModel>();
    std::vector<int> stages = h.stage_map;
    std::sort(stages.begin(), stages.end());
    stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
    return std::make_unique<UnitCostModel>(static_cast<int>(stages.size()), static_cast<int>(h.stage_map.size()));
  }
  if (h.cost_model != "hardware") return make_cost_model(h.cost_model);
  if (!h.hardware) throw std::invalid_argument("cost model 'hardware' needs the header's model, device and network");
  std::vector<std::vector<int>> groups(1);
  for (int r = 0; r < h.world_size; ++r) groups[0].push_back(r);
  for (const auto& g : h.groups) groups.push_back(g);
  std::vector<std::vector<char>> forward(h.world_size, std::vector<char>(h.layers + 1, 0));
  for (std::size_t r = 0; r < s.ranks.size() && static_cast<int>(r) < h.world_size; ++r)
    for (const Op& op : s.ranks[r])
      if (op.kind == OpKind::Forward && op.layer >= 0 && op.layer < h.layers) forward[r][op.layer] = 1;
  return std::make_unique<hw::HardwareCostModel>(*h.hardware, h.layers, h.world_size, std::move(groups), std::move(forward));
}

}  // namespace trainsim
