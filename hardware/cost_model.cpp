#include "hardware/cost_model.h"

#include "hardware/comm.h"

namespace trainsim::hw {

HardwareCostModel::HardwareCostModel(HardwareSetting setting, int layers, int world_size,
                                     std::vector<std::vector<int>> groups, std::vector<std::vector<char>> forward_layers)
    : setting_(std::move(setting)),
      sizes_(setting_, layers),
      world_size_(world_size),
      groups_(std::move(groups)),
      forward_layers_(std::move(forward_layers)) {}

double HardwareCostModel::seconds_of(const Op& op, int group_size) const {
  const double busy = busy_seconds(op, group_size);
  return is_timed(op.kind) ? busy + setting_.device.efficiency.dispatch_s : busy;
}

double HardwareCostModel::busy_seconds(const Op& op, int group_size) const {
  const int L = static_cast<int>(sizes_.layers().size());
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward:
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight:
    case OpKind::Loss: {
      const int layer = op.kind == OpKind::Loss ? L - 1 : op.layer;
      Work w = compute_work(setting_, sizes_.layers().at(layer), op.kind, static_cast<int>(op.batches.size()));
      return work_seconds(setting_.device, w);
    }
    case OpKind::Update: {
      // The shards it updates: those of the optimizer state it reads.
      double params = sizes_.layer_parameters(op.layer);
      for (const Tensor& t : op.reads)
        if (t.kind == TensorKind::OptState) params *= static_cast<double>(t.shards.size()) / t.num_shards;
      Work w = compute_work(setting_, sizes_.layers().at(op.layer), op.kind, 0, params);
      return work_seconds(setting_.device, w);
    }
    case OpKind::Send: {
      if (op.reads.empty() || op.peer < 0) return 0;
      return p2p_seconds(sizes_.wire_bytes(op.reads.front()), setting_.network.link_for({op.rank, op.peer}));
    }
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllReduce:
    case OpKind::Barrier:
    case OpKind::Broadcast:
    case OpKind::Reduce: {
      static const std::vector<int> none;
      const std::vector<int>& members =
          op.group >= 0 && op.group < static_cast<int>(groups_.size()) ? groups_[op.group] : none;
      Link link = members.empty() ? setting_.network.link_for({op.rank}) : setting_.network.link_for(members);
      double bytes = 0;
      Collective c = Collective::AllReduce;
      if (op.kind == OpKind::AllGather) {
        c = Collective::AllGather;
        if (!op.writes.empty()) bytes = sizes_.wire_bytes(op.writes.front());
      } else if (op.kind == OpKind::ReduceScatter) {
        c = Collective::ReduceScatter;
        if (!op.reads.empty()) bytes = sizes_.wire_bytes(op.reads.front());
      } else if (op.kind == OpKind::AllReduce && !op.reads.empty()) {
        bytes = sizes_.wire_bytes(op.reads.front());
      } else if (op.kind == OpKind::Broadcast) {  // the root reads the tensor, the others write it
        c = Collective::Broadcast;
        const TensorList& t = op.reads.empty() ? op.writes : op.reads;
        if (!t.empty()) bytes = sizes_.wire_bytes(t.front());
      } else if (op.kind == OpKind::Reduce) {
        c = Collective::Reduce;
        if (!op.reads.empty()) bytes = sizes_.wire_bytes(op.reads.front());
      }
      return collective_seconds(c, group_size, bytes, link);
    }
    default: return 0;
  }
}

Time HardwareCostModel::duration(const Op& op, int group_size) const { return seconds(seconds_of(op, group_size)); }

double HardwareCostModel::memory(const Tensor& t, int rank) const {
  bool here = false;
  if (t.kind == TensorKind::Activation && rank >= 0 && rank < static_cast<int>(forward_layers_.size()) &&
      t.layer < static_cast<int>(forward_layers_[rank].size()))
    here = forward_layers_[rank][t.layer] != 0;
  return sizes_.resident_bytes(t, here);
}

}  // namespace trainsim::hw
