#include "sim/op.h"

#include <fmt/format.h>

#include "sim/errors.h"

namespace trainsim {

std::string Op::where_suffix() const { return where.empty() ? std::string() : fmt::format(" ({})", where); }

const Tensor* expert_weight(const Op& op) {
  for (const Tensor& t : op.reads)
    if (t.expert() && (t.kind == TensorKind::Weight || t.kind == TensorKind::OptState)) return &t;
  return nullptr;
}

std::string Op::label() const { return fmt::format("rank {}: {}{}", rank, describe(), where_suffix()); }

SimError op_error(const Op& op, const std::string& what) { return SimError(fmt::format("{}: {}", op.label(), what)); }

const char* op_name(OpKind k) {
  switch (k) {
    case OpKind::Load: return "load";
    case OpKind::Forward: return "forward";
    case OpKind::Backward: return "backward";
    case OpKind::BackwardInput: return "backward-input";
    case OpKind::BackwardWeight: return "backward-weight";
    case OpKind::Loss: return "loss";
    case OpKind::Update: return "update";
    case OpKind::Accumulate: return "accumulate";
    case OpKind::Free: return "free";
    case OpKind::Send: return "send";
    case OpKind::Recv: return "recv";
    case OpKind::AllGather: return "all-gather";
    case OpKind::ReduceScatter: return "reduce-scatter";
    case OpKind::AllReduce: return "all-reduce";
    case OpKind::Barrier: return "barrier";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Reduce: return "reduce";
    case OpKind::AllToAll: return "all-to-all";
  }
  return "?";
}

const char* puzzle_event_name(OpKind k) {
  switch (k) {
    case OpKind::Send:
    case OpKind::Recv: return "pass";
    case OpKind::AllGather: return "allgather";
    case OpKind::ReduceScatter: return "scatterreduce";
    case OpKind::AllReduce: return "allreduce";
    case OpKind::AllToAll: return "alltoall";
    default: return op_name(k);
  }
}

std::string Op::describe() const {
  std::string s = op_name(kind);
  if (layer >= 0 && kind != OpKind::Loss) s += fmt::format(" layer {}", layer);
  if (!batches.empty()) s += fmt::format(" batches {{{}}}", batches.str());
  if (kind == OpKind::Send) s += fmt::format(" to rank {}", peer);
  if (kind == OpKind::Recv) s += peer < 0 ? std::string(" from any rank") : fmt::format(" from rank {}", peer);
  if (is_collective(kind) && group != 0) s += fmt::format(" in group {}", group);
  if (is_rooted(kind)) s += fmt::format(" root {}", peer);
  return s;
}

}  // namespace trainsim
