#include "schedules/cost_models.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

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
  // Where each rank runs which forward, at which TP degree; each rank's TP group and whether it runs
  // sequence parallelism (it reduce-scatters or all-gathers an activation or its grad over its TP group).
  std::vector<std::vector<char>> forward(h.world_size, std::vector<char>(h.layers + 1, 0));
  hw::TpLayout tp;
  if (std::vector<int> by_rank = tp_groups_by_rank(h);
      std::any_of(by_rank.begin(), by_rank.end(), [](int g) { return g > 0; }))
    tp.group = std::move(by_rank), tp.sequence_parallel.assign(h.world_size, 0);
  for (std::size_t r = 0; r < s.ranks.size() && static_cast<int>(r) < h.world_size; ++r) {
    const int group = tp.group.empty() ? 0 : tp.group[r];
    for (const Op& op : s.ranks[r]) {
      if (is_compute(op.kind) && op.kind != OpKind::Update) {
        int degree = 1;
        const Tensor* sliced = nullptr;
        for (const auto* list : {&op.reads, &op.writes})
          for (const Tensor& t : *list)
            if (t.tp_size > degree) degree = t.tp_size, sliced = &t;
        if (sliced) {
          const int members = group > 0 ? static_cast<int>(h.groups[group - 1].size()) : 0;
          if (members != degree)
            throw std::invalid_argument(fmt::format(
                "{}: it computes with the TP slice {} (TP degree {}), but {}; the hardware cost model times a "
                "layer's TP communication over the rank's TP group (the header group named tp... that holds it, "
                "e.g. 'group 1 tp0 0 1')",
                op.label(), sliced->str(), degree,
                group > 0 ? fmt::format("its TP group {} ('{}') has {} ranks", group, h.group_names[group - 1], members)
                          : std::string("no TP group holds the rank")));
        }
        if (op.kind == OpKind::Forward && op.layer >= 0 && op.layer < h.layers)
          forward[r][op.layer] = static_cast<char>(degree);
      } else if (group > 0 && op.group == group &&
                 (op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllGather)) {
        for (const auto* list : {&op.reads, &op.writes})
          for (const Tensor& t : *list)
            if (t.kind == TensorKind::Activation || t.kind == TensorKind::ActivationGrad) tp.sequence_parallel[r] = 1;
      }
    }
  }
  return std::make_unique<hw::HardwareCostModel>(*h.hardware, h.layers, h.world_size, std::move(groups), std::move(forward),
                                                 std::move(tp));
}

}  // namespace trainsim
