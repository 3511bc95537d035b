#include "schedules/recorder.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/algebra.h"
#include "sim/errors.h"

namespace trainsim {

ScheduleRecorder::ScheduleRecorder(ScheduleHeader header) {
  schedule_.header = std::move(header);
  schedule_.ranks.resize(schedule_.header.world_size);
  logs_.resize(schedule_.header.world_size);
}

void ScheduleRecorder::emit(int rank, Op op) {
  op.rank = rank;
  op.where.clear();
  schedule_.ranks[rank].push_back(std::move(op));
}

void ScheduleRecorder::add(int rank, const Tensor& t) { ++logs_[rank].resident[t]; }

void ScheduleRecorder::remove(int rank, const Tensor& t) {
  auto& m = logs_[rank].resident;
  auto it = m.find(t);
  if (it != m.end() && --it->second == 0) m.erase(it);
}

void ScheduleRecorder::flush_pending(int rank) {
  RankLog& log = logs_[rank];
  TensorList dropped;
  for (const auto& [t, n] : log.pending)
    for (int i = 0; i < n; ++i) dropped.push_back(t);
  log.pending.clear();
  if (dropped.empty()) return;
  for (const Tensor& t : dropped) remove(rank, t);
  Op f;
  f.kind = OpKind::Free;
  f.reads = std::move(dropped);
  emit(rank, std::move(f));
}

void ScheduleRecorder::on_op(const Op& op) {
  flush_pending(op.rank);
  emit(op.rank, op);
  for (const Tensor& t : op.writes) {
    add(op.rank, t);
    ++logs_[op.rank].pending[t];
  }
}

void ScheduleRecorder::on_store(int rank, const Tensor* before, const Tensor* after) {
  RankLog& log = logs_[rank];
  if (after) {
    const Tensor& v = *after;
    auto p = log.pending.find(v);
    if (p != log.pending.end()) {
      if (--p->second == 0) log.pending.erase(p);  // an op's output, now stored
    } else if (is_loadable(v)) {
      Op load;
      load.kind = OpKind::Load;
      load.writes = {v};
      emit(rank, std::move(load));
      add(rank, v);
    } else if (v.kind == TensorKind::WeightGrad) {
      // A sum of resident grads (or a copy of one): find resident grads of the same layer and shards whose
      // batch sets partition v's, largest first.
      TensorList parts;
      auto it = log.resident.find(v);
      if (it != log.resident.end()) {
        parts.push_back(v);
      } else {
        std::vector<Tensor> cands;
        for (const auto& [t, n] : log.resident)
          if (t.kind == TensorKind::WeightGrad && t.layer == v.layer && t.shards == v.shards &&
              t.num_shards == v.num_shards && !t.batches.empty() && v.batches.contains(t.batches))
            cands.push_back(t);
        std::stable_sort(cands.begin(), cands.end(),
                         [](const Tensor& a, const Tensor& b) { return a.batches.size() > b.batches.size(); });
        IdSet got;
        for (const Tensor& c : cands)
          if (!got.intersects(c.batches)) {
            parts.push_back(c);
            got = got | c.batches;
          }
        if (got != v.batches)
          throw SimError(fmt::format("rank {}: cannot record {}: it is neither an op's output nor a sum of resident "
                                     "weight grads",
                                     rank, v.str()));
      }
      Op acc;
      acc.kind = OpKind::Accumulate;
      acc.reads = parts;
      acc.writes = {v};
      emit(rank, std::move(acc));
      add(rank, v);
    } else {
      throw SimError(fmt::format("rank {}: cannot record {}: a {} made by local copying, combining or sharding has "
                                 "no op in the schedule format",
                                 rank, v.str(), long_name(v.kind)));
    }
  }
  if (before) {
    Op f;
    f.kind = OpKind::Free;
    f.reads = {*before};
    emit(rank, std::move(f));
    remove(rank, *before);
  }
}

Schedule ScheduleRecorder::finish() {
  for (int r = 0; r < static_cast<int>(logs_.size()); ++r) flush_pending(r);
  // Merge runs of consecutive frees and loads into one op each, as a person would write them.
  for (auto& ops : schedule_.ranks) {
    std::vector<Op> merged;
    for (Op& op : ops) {
      if (!merged.empty() && merged.back().kind == op.kind && (op.kind == OpKind::Free || op.kind == OpKind::Load)) {
        auto& dst = op.kind == OpKind::Free ? merged.back().reads : merged.back().writes;
        auto& src = op.kind == OpKind::Free ? op.reads : op.writes;
        dst.insert(dst.end(), src.begin(), src.end());
        continue;
      }
      merged.push_back(std::move(op));
    }
    ops = std::move(merged);
  }
  return std::move(schedule_);
}

}  // namespace trainsim
