#include "schedules/cost_models.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "hardware/cost_model.h"

namespace trainsim {

std::unique_ptr<CostModel> make_schedule_cost_model(const Schedule& s) {
  return make_schedule_cost_model(ScheduleView(s));
}

namespace {

// The model the header names, before the header's expert loads are given to it.
std::unique_ptr<CostModel> cost_model_of(const RankSource& src) {
  const ScheduleHeader& h = src.header();
  if (h.cost_model == "unit") {
    // Layers are equal shares of the model; a pipeline stage's share (the layers of one rank of the stage
    // map) costs one second per batch, so a chunk of v per stage costs 1/v (sim/cost_model.h).
    // With a stage layout a layer's share is its blocks over the model's (a layer of the embedding or the head
    // alone costs nothing).
    if (h.stage_map.empty())
      return h.layout ? std::make_unique<UnitCostModel>(h.layers, h.layout->blocks_per_layer())
                      : std::make_unique<UnitCostModel>();
    std::vector<int> stages = h.stage_map;
    std::sort(stages.begin(), stages.end());
    stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
    if (h.layout) return std::make_unique<UnitCostModel>(static_cast<int>(stages.size()), h.layout->blocks_per_layer());
    return std::make_unique<UnitCostModel>(static_cast<int>(stages.size()), static_cast<int>(h.stage_map.size()));
  }
  if (h.cost_model != "hardware") return make_cost_model(h.cost_model);
  if (!h.hardware) throw std::invalid_argument("cost model 'hardware' needs the header's model, device and network");
  std::vector<std::vector<int>> groups(1);
  for (int r = 0; r < h.world_size; ++r) groups[0].push_back(r);
  for (const auto& g : h.groups) groups.push_back(g);
  // Each rank's TP group (none: an empty list), from one pass over the groups.
  std::vector<int> tp_group = tp_groups_by_rank(h);
  if (std::none_of(tp_group.begin(), tp_group.end(), [](int g) { return g > 0; })) tp_group.clear();
  auto model = std::make_unique<hw::HardwareCostModel>(*h.hardware, h.layers, h.world_size, std::move(groups),
                                                       h.group_names, std::move(tp_group),
                                                       hw::ModelPlacement{h.layout, h.stage_map});
  // What each rank runs, at which TP degree, with or without sequence parallelism: from every rank's ops now
  // when they are held, else from each rank's as the stream engine issues it (CostModel::prepare_rank).
  if (src.holds_all())
    for (int r = 0; r < h.world_size; ++r) model->prepare_rank(r, src.ops(r));
  return model;
}

}  // namespace

std::unique_ptr<CostModel> make_schedule_cost_model(const RankSource& src) {
  std::unique_ptr<CostModel> model = cost_model_of(src);
  model->set_expert_load(src.header().expert_load);  // (the parser has checked the loads)
  return model;
}

}  // namespace trainsim
