#include "schedules/memory_breakdown.h"

#include <map>

#include "hardware/working_memory.h"

namespace trainsim {

namespace {

double& category(MemoryBreakdown& b, TensorKind k) {
  switch (k) {
    case TensorKind::Weight: return b.weights;
    case TensorKind::WeightGrad: return b.grads;
    case TensorKind::OptState: return b.optimizer;
    default: return b.activations;
  }
}

}  // namespace

std::vector<MemoryBreakdown> predicted_peak_memory(const Schedule& s, const hw::HardwareCostModel& cost) {
  std::vector<MemoryBreakdown> out(s.ranks.size());
  const hw::HardwareSetting& setting = cost.setting();
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const int rank = static_cast<int>(r);
    MemoryBreakdown now;               // resident before the current op (working stays 0)
    std::map<Tensor, int> counts;      // resident instances
    MemoryBreakdown& best = out[r];
    for (const Op& op : s.ranks[r]) {
      if (op.kind != OpKind::Free) {  // (loads and accumulates allocate too)
        const int group = op.group >= 0 && op.group <= static_cast<int>(s.header.groups.size())
                              ? (op.group == 0 ? s.header.world_size : static_cast<int>(s.header.groups[op.group - 1].size()))
                              : 1;
        MemoryBreakdown at = now;
        for (const Tensor& t : op.writes) category(at, t.kind) += cost.sizes().wire_bytes(t);
        at.working = hw::op_temporary_bytes(setting, cost.sizes(), op, group);
        if (at.total() > best.total()) {
          best = at;
          best.op = op.describe() + op.where_suffix();
        }
      }
      if (op.kind == OpKind::Free) {
        for (const Tensor& t : op.reads) {
          auto it = counts.find(t);
          if (it == counts.end() || it->second == 0) continue;  // (the simulator refuses such a schedule)
          --it->second;
          category(now, t.kind) -= cost.memory(t, rank);
        }
      } else {
        for (const Tensor& t : op.writes) {
          ++counts[t];
          category(now, t.kind) += cost.memory(t, rank);
        }
      }
    }
  }
  return out;
}

}  // namespace trainsim
