#include "sim/exposed_comm.h"

#include <algorithm>

namespace trainsim {

std::vector<TimeInterval> merge_intervals(std::vector<TimeInterval> v) {
  std::sort(v.begin(), v.end());
  std::vector<TimeInterval> out;
  for (const TimeInterval& i : v) {
    if (i.end <= i.start) continue;
    if (!out.empty() && i.start <= out.back().end) out.back().end = std::max(out.back().end, i.end);
    else out.push_back(i);
  }
  return out;
}

std::vector<TimeInterval> subtract_intervals(const std::vector<TimeInterval>& a, const std::vector<TimeInterval>& b) {
  std::vector<TimeInterval> out;
  std::size_t j = 0;
  for (const TimeInterval& i : a) {
    Time cur = i.start;
    while (j < b.size() && b[j].end <= cur) ++j;  // b[j] ends before this interval: no later one needs it
    for (std::size_t k = j; k < b.size() && b[k].start < i.end; ++k) {
      if (b[k].start > cur) out.push_back({cur, b[k].start});
      cur = std::max(cur, b[k].end);
      if (cur >= i.end) break;
    }
    if (cur < i.end) out.push_back({cur, i.end});
  }
  return out;
}

Time total_length(const std::vector<TimeInterval>& v) {
  Time t = 0;
  for (const TimeInterval& i : v) t += i.end - i.start;
  return t;
}

namespace {

OpKind kind_of(const OpRun& r) { return r.op.kind; }
OpKind kind_of(const RanOp& r) { return r.kind; }

template <typename Runs, typename Pred>
std::vector<TimeInterval> intervals_of(const Runs& runs, Pred keep) {
  std::vector<TimeInterval> v;
  for (const auto& r : runs)
    if (keep(kind_of(r))) v.push_back({r.start, r.end});
  return merge_intervals(std::move(v));
}

bool is_comm(OpKind k) { return is_p2p(k) || is_collective(k); }

}  // namespace

std::vector<TimeInterval> compute_intervals(const std::vector<OpRun>& runs) {
  return intervals_of(runs, [](OpKind k) { return is_compute(k); });
}

std::vector<TimeInterval> comm_intervals(const std::vector<OpRun>& runs) { return intervals_of(runs, is_comm); }

std::vector<TimeInterval> compute_intervals(std::span<const RanOp> runs) {
  return intervals_of(runs, [](OpKind k) { return is_compute(k); });
}

std::vector<TimeInterval> comm_intervals(std::span<const RanOp> runs) { return intervals_of(runs, is_comm); }

std::vector<TimeInterval> exposed_comm_intervals(const std::vector<OpRun>& runs) {
  return subtract_intervals(comm_intervals(runs), compute_intervals(runs));
}

std::vector<std::vector<TimeInterval>> exposed_comm(const Trace& trace) {
  std::vector<std::vector<TimeInterval>> out;
  out.reserve(trace.ranks.size());
  for (const auto& runs : trace.ranks) out.push_back(exposed_comm_intervals(runs));
  return out;
}

bool marks_exposed_comm(const Trace& trace) {
  if (trace.cost_model == "puzzle") return false;
  for (const auto& runs : trace.ranks)
    for (const OpRun& r : runs)
      if (is_comm(r.op.kind) && r.end > r.start) return true;
  return false;
}

}  // namespace trainsim
