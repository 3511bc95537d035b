#include "schedules/op_gaps.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>

namespace trainsim {

std::vector<std::vector<double>> dispatch_gaps(const MeasuredStep& step) {
  const double none = std::numeric_limits<double>::quiet_NaN();
  const auto& ranks = step.ranks;
  // The end of each send, by (source, destination), in program order.
  std::map<std::pair<int, int>, std::vector<double>> sends;
  for (std::size_t r = 0; r < ranks.size(); ++r)
    for (const MeasuredOp& op : ranks[r])
      if (op.kind == OpKind::Send && op.peer >= 0) sends[{static_cast<int>(r), op.peer}].push_back(op.end_s);
  std::vector<std::vector<double>> gaps(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    std::map<long long, double> thread_end;       // tid -> end of its last op
    std::map<std::string, double> written;        // tensor -> end of the last op that wrote it
    std::map<int, std::size_t> recvs_from;        // peer -> recvs seen
    for (const MeasuredOp& op : ranks[r]) {
      double gap = none;
      if (op.kind == OpKind::Recv) {
        const auto it = sends.find({op.peer, static_cast<int>(r)});
        const std::size_t k = recvs_from[op.peer]++;
        if (it != sends.end() && k < it->second.size()) gap = op.end_s - std::max(op.start_s, it->second[k]);
      } else {
        double ready = -std::numeric_limits<double>::infinity();
        if (auto t = thread_end.find(op.tid); t != thread_end.end()) ready = t->second;
        for (const std::string& x : op.reads)
          if (auto w = written.find(x); w != written.end()) ready = std::max(ready, w->second);
        if (ready > -std::numeric_limits<double>::infinity()) gap = op.start_s - ready;
      }
      gaps[r].push_back(gap == gap ? std::max(gap, 0.0) : none);
      thread_end[op.tid] = op.end_s;
      for (const std::string& x : op.writes) written[x] = op.end_s;
    }
  }
  return gaps;
}

}  // namespace trainsim
