// An independent model of PyTorch pipelining's runtime, for checking trainsim's import of its schedule CSV
// against what PyTorch would run (docs/pytorch-csv.md). Written from PyTorch's
// torch/distributed/pipelining/schedules.py (read at commit 00722e648b740f91d0e71494baa17891749fd291):
// - dualpipev_csv: ScheduleDualPipeV._calculate_single_rank_operations, the order with OVERLAP_F_B cells;
// - lower_send_recv: _add_send_recv, the pass that adds SEND/RECV actions to a compute-only schedule;
// - runtime_makespan: _PipelineScheduleRuntime._step_microbatches under unit costs, action by action.
// It shares no code with interop/pytorch_csv_*.cpp: its own cell parser, its own timing.
#pragma once

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace trainsim::testing::pt {

/// One action: type "F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B" or "RECV_B", stage, microbatch.
struct Act {
  std::string type;
  int stage = 0;
  int mb = 0;
  bool operator<(const Act& o) const { return std::tie(type, stage, mb) < std::tie(o.type, o.stage, o.mb); }
  bool operator==(const Act& o) const { return type == o.type && stage == o.stage && mb == o.mb; }
};
/// One cell: one action, or the sub-actions of an OVERLAP_F_B cell (PyTorch runs them in order).
using Cell = std::vector<Act>;
/// One row per rank.
using Rows = std::vector<std::vector<Cell>>;

inline std::string text(const Act& a) { return std::to_string(a.stage) + a.type + std::to_string(a.mb); }
inline std::string text(const Cell& c) {
  if (c.size() == 1) return text(c[0]);
  std::string s = "(";
  for (std::size_t i = 0; i < c.size(); ++i) s += (i ? ";" : "") + text(c[i]);
  return s + ")OVERLAP_F_B";
}
inline std::string to_csv(const Rows& rows) {
  std::string out;
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + text(row[i]);
    out += "\n";
  }
  return out;
}

inline Act parse_act(const std::string& s) {
  std::size_t i = 0, j;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  for (j = i; j < s.size() && !std::isdigit(static_cast<unsigned char>(s[j]));) ++j;
  if (i == 0 || j == i || j == s.size()) throw std::invalid_argument("bad action '" + s + "'");
  return {s.substr(i, j - i), std::stoi(s.substr(0, i)), std::stoi(s.substr(j))};
}

/// Rows of a CSV whose cells are actions or (a;b)OVERLAP_F_B; empty cells are skipped.
inline Rows parse_csv(const std::string& csv) {
  Rows rows;
  std::size_t start = 0;
  while (start < csv.size()) {
    std::size_t nl = csv.find('\n', start);
    if (nl == std::string::npos) nl = csv.size();
    const std::string line = csv.substr(start, nl - start);
    start = nl + 1;
    rows.emplace_back();
    std::size_t from = 0;
    while (from <= line.size()) {
      std::size_t comma = line.find(',', from);
      if (comma == std::string::npos) comma = line.size();
      const std::string cell = line.substr(from, comma - from);
      from = comma + 1;
      if (cell.empty()) continue;
      Cell c;
      if (cell[0] == '(') {
        const std::string inner = cell.substr(1, cell.find(')') - 1);
        std::size_t f = 0;
        while (f <= inner.size()) {
          std::size_t semi = inner.find(';', f);
          if (semi == std::string::npos) semi = inner.size();
          c.push_back(parse_act(inner.substr(f, semi - f)));
          f = semi + 1;
        }
      } else {
        c.push_back(parse_act(cell));
      }
      rows.back().push_back(c);
    }
  }
  return rows;
}

/// V placement of 2p stages on p ranks: stage s on rank s, then 2p-1-s.
inline int v_rank(int stage, int p) { return stage < p ? stage : 2 * p - 1 - stage; }

/// ScheduleDualPipeV's compute-only order for `p` ranks and `m` >= 2p microbatches, with its OVERLAP_F_B
/// cells: eight steps per rank (F0; F0 F1; I1 W F1; the overlapped main step; B1 with an overlapped F1 B0;
/// B1 B0 with the second half split; W B0; the weights left), W passes taken from a queue of split backwards.
inline Rows dualpipev_rows(int p, int m) {
  Rows rows(p);
  for (int r = 0; r < p; ++r) {
    const int s0 = r, s1 = 2 * p - 1 - r;
    auto& out = rows[r];
    std::map<int, int> f, b;            // stage -> next forward / next backward microbatch
    std::vector<std::pair<int, int>> weights;  // (stage, microbatch) of split backwards whose W is to run
    auto fwd = [&](int s) { return Act{"F", s, f[s]++}; };
    auto bwd = [&](int s, bool split) {
      if (split) weights.emplace_back(s, b[s]);
      return Act{split ? "I" : "B", s, b[s]++};
    };
    auto weight = [&] {
      if (weights.empty()) return;
      out.push_back({Act{"W", weights.front().first, weights.front().second}});
      weights.erase(weights.begin());
    };
    for (int k = 0; k < 2 * (p - r - 1); ++k) out.push_back({fwd(s0)});
    for (int k = 0; k < r + 1; ++k) out.push_back({fwd(s0)}), out.push_back({fwd(s1)});
    for (int k = 0; k < p - r - 1; ++k) {
      out.push_back({bwd(s1, true)});
      weight();
      out.push_back({fwd(s1)});
    }
    for (int k = 0; k < m - 2 * p + r + 1; ++k) {
      if (k == 0 && r == p - 1) {  // the last rank's first pair is not overlapped
        out.push_back({fwd(s0)});
        out.push_back({bwd(s1, false)});
      } else {
        Act x = fwd(s0), y = bwd(s1, false);
        out.push_back(Cell{x, y});
      }
      Act x = fwd(s1), y = bwd(s0, false);
      out.push_back(Cell{x, y});
    }
    for (int k = 0; k < p - r - 1; ++k) {
      out.push_back({bwd(s1, false)});
      Act x = fwd(s1), y = bwd(s0, false);
      out.push_back(Cell{x, y});
    }
    bool split = false;
    for (int k = 0; k < r + 1; ++k) {
      if (k == (r + 1) / 2 && r % 2 == 1) split = true;
      out.push_back({bwd(s1, split)});
      if (k == (r + 1) / 2 && r % 2 == 0) split = true;
      out.push_back({bwd(s0, split)});
    }
    for (int k = 0; k < p - r - 1; ++k) {
      weight();
      out.push_back({bwd(s0, split)});
    }
    for (int k = 0; k < r + 1; ++k) weight();
  }
  return rows;
}

/// 1F1B on `p` stages (loop placement), `m` >= p microbatches, each steady-state forward and the backward
/// after it overlapped in one cell: rank r warms up with p-1-r forwards, then (F_k; B_{k-(p-1-r)}) cells,
/// then the backwards left.
inline Rows overlapped_1f1b_rows(int p, int m) {
  Rows rows(p);
  for (int r = 0; r < p; ++r) {
    const int warm = p - 1 - r;
    int f = 0, b = 0;
    while (f < warm) rows[r].push_back({Act{"F", r, f++}});
    while (f < m) {
      Act x{"F", r, f++}, y{"B", r, b++};
      rows[r].push_back(Cell{x, y});
    }
    while (b < m) rows[r].push_back({Act{"B", r, b++}});
  }
  return rows;
}

/// _add_send_recv: in rounds over the ranks in order, a rank's next cell is scheduled once every sub-action's
/// input is there (its RECV, or the producing action, on this rank); the cell is written, then for each
/// sub-action whose output goes to another rank its SEND on this row and the peer's RECV on the peer's row.
inline Rows lower_send_recv(const Rows& compute, const std::vector<int>& stage_rank) {
  const int stages = static_cast<int>(stage_rank.size());
  const int world = static_cast<int>(compute.size());
  Rows out(world);
  std::vector<std::set<Act>> prev(world);
  std::vector<std::size_t> next(world, 0);
  auto sends = [&](const Act& a) {
    if (a.type == "F") return a.stage + 1 < stages && stage_rank[a.stage + 1] != stage_rank[a.stage];
    if (a.type == "B" || a.type == "I") return a.stage > 0 && stage_rank[a.stage - 1] != stage_rank[a.stage];
    return false;
  };
  auto ready = [&](const Act& a, const std::set<Act>& done) {
    if (a.type == "F" && a.stage > 0)
      return done.count({"RECV_F", a.stage, a.mb}) || done.count({"F", a.stage - 1, a.mb});
    if ((a.type == "B" || a.type == "I") && a.stage < stages - 1)
      return done.count({"RECV_B", a.stage, a.mb}) || done.count({"I", a.stage + 1, a.mb}) ||
             done.count({"B", a.stage + 1, a.mb});
    return true;
  };
  for (bool left = true; left;) {
    left = false;
    bool progress = false;
    for (int r = 0; r < world; ++r) {
      if (next[r] >= compute[r].size()) continue;
      left = true;
      const Cell& c = compute[r][next[r]];
      if (!std::all_of(c.begin(), c.end(), [&](const Act& a) { return ready(a, prev[r]); })) continue;
      out[r].push_back(c);
      for (const Act& a : c) {
        prev[r].insert(a);
        if (!sends(a)) continue;
        const bool fwd = a.type == "F";
        const Act send{fwd ? "SEND_F" : "SEND_B", a.stage, a.mb};
        const Act recv{fwd ? "RECV_F" : "RECV_B", fwd ? a.stage + 1 : a.stage - 1, a.mb};
        out[r].push_back({send});
        prev[r].insert(send);
        const int peer = stage_rank[recv.stage];
        out[peer].push_back({recv});
        prev[peer].insert(recv);
      }
      ++next[r];
      progress = true;
    }
    if (left && !progress) throw std::runtime_error("malformed compute schedule: cannot place sends and receives");
  }
  return out;
}

/// The makespan, in unit-cost seconds (a stage's F and B cost p/S, its I and W half that, communication 0: the
/// unit model charges a stage its share of the model, p ranks over S stages, docs/design.md), of a compute+comms schedule
/// as _PipelineScheduleRuntime._step_microbatches runs it without custom functions: each rank performs its
/// row in order on one compute stream, an OVERLAP_F_B cell as its sub-actions one after the other; a compute
/// waits for its input (a local action, or the message its RECV posted); a SEND's message leaves when the
/// compute issued before it on its rank has ended (NCCL's stream waits for the compute stream) and arrives
/// at once; a RECV only posts. Throws std::runtime_error when no rank can go on.
inline double runtime_makespan(const Rows& rows, const std::vector<int>& stage_rank) {
  const int stages = static_cast<int>(stage_rank.size());
  const int world = static_cast<int>(rows.size());
  std::map<Act, double> end;                      // compute action -> end time
  std::map<std::tuple<char, int, int>, double> msg;  // ('A', stage, mb) activation into stage, ('G', ...) its grad
  std::vector<double> clock(world, 0);
  const double pass = static_cast<double>(world) / stages;  // a stage's F or B: 1 s with one stage per rank
  std::vector<std::size_t> cell(world, 0), sub(world, 0);
  auto input = [&](int r, const Act& a, double& at) {  // false while the input is not known yet
    auto done = [&](const Act& x) {
      auto it = end.find(x);
      if (it == end.end()) return false;
      at = std::max(at, it->second);
      return true;
    };
    auto message = [&](char kind, int stage) {
      auto it = msg.find({kind, stage, a.mb});
      if (it == msg.end()) return false;
      at = std::max(at, it->second);
      return true;
    };
    if (a.type == "F") {
      if (a.stage == 0) return true;
      return stage_rank[a.stage - 1] == r ? done({"F", a.stage - 1, a.mb}) : message('A', a.stage);
    }
    if (a.type == "W") return done({"I", a.stage, a.mb});
    if (!done({"F", a.stage, a.mb})) return false;  // B, I
    if (a.stage == stages - 1) return true;
    if (stage_rank[a.stage + 1] == r) return done({"B", a.stage + 1, a.mb}) || done({"I", a.stage + 1, a.mb});
    return message('G', a.stage);
  };
  while (true) {
    bool progress = false;
    for (int r = 0; r < world; ++r)
      while (cell[r] < rows[r].size()) {
        const Act& a = rows[r][cell[r]][sub[r]];
        if (a.type == "SEND_F") {
          msg[{'A', a.stage + 1, a.mb}] = clock[r];
        } else if (a.type == "SEND_B") {
          msg[{'G', a.stage - 1, a.mb}] = clock[r];
        } else if (a.type == "F" || a.type == "B" || a.type == "I" || a.type == "W") {
          double at = clock[r];
          if (!input(r, a, at)) break;
          clock[r] = at + (a.type == "I" || a.type == "W" ? pass / 2 : pass);
          end[a] = clock[r];
        }
        progress = true;
        if (++sub[r] == rows[r][cell[r]].size()) sub[r] = 0, ++cell[r];
      }
    bool left = false;
    for (int r = 0; r < world; ++r) left = left || cell[r] < rows[r].size();
    if (!left) break;
    if (!progress) throw std::runtime_error("the runtime would hang: no rank can go on");
  }
  return *std::max_element(clock.begin(), clock.end());
}

}  // namespace trainsim::testing::pt
