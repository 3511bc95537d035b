// Importing PyTorch pipelining's schedule CSV (docs/pytorch-csv.md) into a Schedule: compute-only rows get
// their sends and receives; both forms get loads, the loss, frees, grad accumulation and updates.
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "schedules/defaults.h"
#include "schedules/limits.h"
#include "interop/pytorch_csv.h"
#include "interop/pytorch_csv_cells.h"

namespace trainsim {

namespace {

using namespace csv;

// Streams of the imported communication (DESIGN §2: 0 = compute). PyTorch's runtime posts each receive as
// an irecv on the pair's own NCCL communicator and the compute waits for its work: receives from rank p go
// on their own stream, 2 + p, so a posted receive waits for its message without holding the compute or the
// receives from other ranks; sends (eager, as isend) on stream 1.
constexpr int kSendStream = 1;
int recv_stream(int src) { return 2 + src; }

/// A receive the compute-only import places: before the receiver's compute number `before` (in its row).
struct PlannedRecv {
  int before = 0;
  int send_step = 0;
  int src = 0;
  int seq = 0;  ///< position in the (src, receiver) channel
  Tensor tensor;
  std::string where;
};


class Importer {
 public:
  Importer(const std::string& csv, int microbatches, std::vector<int> stage_map, std::string source)
      : source_(std::move(source)), given_m_(microbatches), map_(std::move(stage_map)) {
    std::vector<std::string> lines = split_rows(csv, source_);
    if (lines.empty()) throw std::invalid_argument(fmt::format("{}: the CSV has no rows (one row per rank)", source_));
    rows_.resize(lines.size());
    for (std::size_t r = 0; r < lines.size(); ++r) {
      std::vector<std::string> cells = split_cells(lines[r]);
      for (std::size_t c = 0; c < cells.size(); ++c)
        if (!cells[c].empty())
          for (Action& a : parse_cell_actions(source_, cells[c], static_cast<int>(r), static_cast<int>(c)))
            rows_[r].push_back(std::move(a));
    }
    world_ = static_cast<int>(rows_.size());
  }

  Schedule run() {
    if (given_m_ < 0) throw std::invalid_argument(fmt::format("{}: microbatches must be at least 1, got {}", source_, given_m_));
    if (given_m_ > kMaxCount)
      throw std::invalid_argument(fmt::format("{}: {} microbatches is above the limit of {}", source_, given_m_, kMaxCount));
    bool any = false;
    for (const auto& row : rows_)
      for (const Action& a : row) {
        any = true;
        stages_ = std::max(stages_, a.stage + 1);
        if (!is_compute_act(a.act)) comms_ = true;
        if (a.act == Act::Unshard) fsdp_stages_.insert(a.stage);
      }
    if (!any) throw std::invalid_argument(fmt::format("{}: the CSV has no actions", source_));
    std::set<int> used;
    for (const auto& row : rows_)
      for (const Action& a : row) used.insert(a.stage);
    if (static_cast<int>(used.size()) != stages_) {
      int s = 0;
      while (used.count(s)) ++s;
      throw std::invalid_argument(fmt::format("{}: stage {} appears in no row, but the CSV uses stages up to {}", source_,
                                              s, stages_ - 1));
    }
    resolve_stage_map();
    resolve_microbatches();
    index_actions();
    check_complete();
    if (comms_) check_matching();
    for (int r = 0; r < world_; ++r) check_row_order(r);
    return build();
  }

 private:
  // ---- stage map ----
  void resolve_stage_map() {
    if (!map_.empty()) {
      if (static_cast<int>(map_.size()) != stages_)
        throw std::invalid_argument(fmt::format("{}: the stage map gives {} stage{} but the CSV uses stages 0..{}",
                                                source_, map_.size(), map_.size() == 1 ? "" : "s", stages_ - 1));
      for (std::size_t s = 0; s < map_.size(); ++s)
        if (map_[s] < 0 || map_[s] >= world_)
          throw std::invalid_argument(fmt::format("{}: the stage map puts stage {} on rank {}, but the CSV has {} row{} "
                                                  "(ranks 0..{})",
                                                  source_, s, map_[s], world_, world_ == 1 ? "" : "s", world_ - 1));
      for (const auto& row : rows_)
        for (const Action& a : row)
          if (map_[a.stage] != a.row)
            fail_at(source_, a, fmt::format("stage {} belongs to rank {} by the stage map, not rank {}", a.stage,
                                            map_[a.stage], a.row));
      return;
    }
    // Inferred: the row that holds each stage; a stage on two rows is an error.
    std::vector<const Action*> first(stages_, nullptr);
    for (const auto& row : rows_)
      for (const Action& a : row) {
        const Action*& f = first[a.stage];
        if (!f) f = &a;
        else if (f->row != a.row)
          fail_at(source_, a, fmt::format("stage {} is on two ranks: rank {} holds it too (row {}, column {}, cell '{}'); "
                                          "a stage runs on one rank",
                                          a.stage, f->row, f->row + 1, f->col + 1, f->cell));
      }
    map_.resize(stages_);
    for (int s = 0; s < stages_; ++s) map_[s] = first[s]->row;
    bool loop = true, v = true;
    for (int s = 0; s < stages_; ++s) {
      loop = loop && map_[s] == s % world_;
      v = v && map_[s] == v_style_rank(s, world_);
    }
    if (!loop && !v) {
      std::string m;
      for (int r : map_) m += (m.empty() ? "" : ",") + std::to_string(r);
      int s = 0;
      while (s < stages_ && map_[s] == s % world_) ++s;
      throw std::invalid_argument(fmt::format(
          "{}: the rows place the stages on ranks {}, which is neither loop style (stage s on rank s % {}) nor V style "
          "(stage s on rank s, then {}-1-s, sweeping down and up the ranks); stage {} is on rank {} (row {}, column {}, cell '{}'). Pass the stage map "
          "explicitly to accept it (trainsim convert --stage-map {})",
          source_, m, world_, 2 * world_, s, first[s]->row, first[s]->row + 1, first[s]->col + 1, first[s]->cell, m));
    }
  }

  void resolve_microbatches() {
    int largest = -1;
    const Action* at = nullptr;
    for (const auto& row : rows_)
      for (const Action& a : row)
        if (a.mb > largest) largest = a.mb, at = &a;
    if (given_m_ == 0) {
      if (largest < 0) throw std::invalid_argument(fmt::format("{}: the CSV has no microbatch actions", source_));
      m_ = largest + 1;
      return;
    }
    m_ = given_m_;
    if (largest >= m_)
      fail_at(source_, *at, fmt::format("microbatch {} is out of range: there are {} microbatches (0..{})", largest, m_, m_ - 1));
  }

  // ---- checks ----
  void index_actions() {
    for (const auto& row : rows_)
      for (const Action& a : row) {
        if (a.act == Act::Unshard || a.act == Act::Reshard) continue;  // may repeat
        auto [it, fresh] = where_.emplace(key_of(a), &a);
        if (!fresh)
          fail_at(source_, a, fmt::format("{} appears twice (also at row {}, column {})", a.cell, it->second->row + 1,
                                          it->second->col + 1));
      }
  }

  const Action* find(Act act, int stage, int mb) const {
    auto it = where_.find(Key{act, stage, mb});
    return it == where_.end() ? nullptr : it->second;
  }

  static const Action* later(const Action* a, const Action* b) {
    if (!a) return b;
    if (!b) return a;
    return a->col > b->col ? a : b;
  }

  void check_complete() {
    for (int s = 0; s < stages_; ++s)
      for (int b = 0; b < m_; ++b) {
        const Action* f = find(Act::F, s, b);
        const Action* full = find(Act::B, s, b);
        const Action* in = find(Act::I, s, b);
        const Action* wt = find(Act::W, s, b);
        if (!f)
          fail_row(source_, map_[s], fmt::format("stage {} has no forward of microbatch {} (no cell '{}'; there are {} "
                                                 "microbatches)",
                                                 s, b, cell_text(s, Act::F, b), m_));
        if (full && (in || wt))
          fail_at(source_, *later(full, later(in, wt)),
                  fmt::format("microbatch {} of stage {} has both a full backward ({}) and a split one ({}); older PyTorch "
                              "versions wrote the input half of a split backward as B: write it as I",
                              b, s, full->cell, (in ? in : wt)->cell));
        if (!full && !in && !wt)
          fail_at(source_, *f, fmt::format("microbatch {} of stage {} has a forward but no backward (no '{}', nor '{}' and "
                                           "'{}')",
                                           b, s, cell_text(s, Act::B, b), cell_text(s, Act::I, b), cell_text(s, Act::W, b)));
        if (in && !wt)
          fail_at(source_, *in, fmt::format("a backward input without its backward weight '{}'", cell_text(s, Act::W, b)));
        if (wt && !in)
          fail_at(source_, *wt, fmt::format("a backward weight without its backward input '{}'", cell_text(s, Act::I, b)));
      }
  }

  // Walks one row in order and checks that what each action needs was done before it on this rank.
  void check_row_order(int r) {
    std::set<Key> done;
    std::map<int, bool> unsharded;
    auto did = [&](Act a, int s, int b) { return done.count(Key{a, s, b}) > 0; };
    auto did_input_grad = [&](int s, int b) { return did(Act::B, s, b) || did(Act::I, s, b); };
    auto need_before = [&](const Action& a, bool ok, const std::string& what) {
      if (!ok) fail_at(source_, a, what);
    };
    for (const Action& a : rows_[r]) {
      const int s = a.stage, b = a.mb;
      switch (a.act) {
        case Act::F:
          if (s > 0) {
            if (map_[s - 1] == r) {
              const Action* p = find(Act::F, s - 1, b);
              need_before(a, did(Act::F, s - 1, b),
                          fmt::format("its input comes from stage {}'s forward '{}' on this rank, which is not before it "
                                      "(column {})",
                                      s - 1, p->cell, p->col + 1));
            } else if (comms_) {
              need_before(a, did(Act::RecvF, s, b),
                          fmt::format("stage {} is on rank {}: receive the input first ('{}' before this cell)", s - 1,
                                      map_[s - 1], cell_text(s, Act::RecvF, b)));
            }
          }
          check_unsharded(a, unsharded);
          break;
        case Act::B:
        case Act::I: {
          const Action* f = find(Act::F, s, b);
          need_before(a, did(Act::F, s, b), fmt::format("its forward '{}' (column {}) is not before it", f->cell, f->col + 1));
          if (s + 1 < stages_) {
            if (map_[s + 1] == r) {
              const Action* p = later(find(Act::B, s + 1, b), find(Act::I, s + 1, b));
              need_before(a, did_input_grad(s + 1, b),
                          fmt::format("its output grad comes from stage {}'s backward '{}' on this rank, which is not "
                                      "before it (column {})",
                                      s + 1, p->cell, p->col + 1));
            } else if (comms_) {
              need_before(a, did(Act::RecvB, s, b),
                          fmt::format("stage {} is on rank {}: receive the gradient first ('{}' before this cell)", s + 1,
                                      map_[s + 1], cell_text(s, Act::RecvB, b)));
            }
          }
          check_unsharded(a, unsharded);
          break;
        }
        case Act::W: {
          const Action* in = find(Act::I, s, b);
          need_before(a, did(Act::I, s, b), fmt::format("its backward input '{}' (column {}) is not before it", in->cell, in->col + 1));
          if (fsdp_stages_.count(s) && !unsharded[s])  // PyTorch's runtime runs W only on an unsharded stage
            fail_at(source_, a, fmt::format("stage {} is resharded here: PyTorch's runtime needs the stage unsharded "
                                            "for a backward weight too (move '{}' after it)",
                                            s, cell_text(s, Act::Reshard, -1)));
          break;
        }
        case Act::SendF:  // (where it may go was checked by check_matching)
          need_before(a, did(Act::F, s, b), fmt::format("it sends the output of '{}', which is not before it", cell_text(s, Act::F, b)));
          break;
        case Act::SendB:
          need_before(a, did_input_grad(s, b),
                      fmt::format("it sends the input grad of '{}' or '{}', neither of which is before it",
                                  cell_text(s, Act::B, b), cell_text(s, Act::I, b)));
          break;
        case Act::RecvF:
        case Act::RecvB: break;
        case Act::Unshard:
          if (unsharded[s]) fail_at(source_, a, fmt::format("stage {} is already unsharded (no {} since the last {})", s,
                                                            cell_text(s, Act::Reshard, -1), a.cell));
          unsharded[s] = true;
          break;
        case Act::Reshard:
          if (!unsharded[s]) fail_at(source_, a, fmt::format("stage {} is not unsharded here (no {} before it)", s, cell_text(s, Act::Unshard, -1)));
          unsharded[s] = false;
          break;
        case Act::ReduceGrad:
          for (int mb = 0; mb < m_; ++mb)
            if (!did(Act::B, s, mb) && !did(Act::W, s, mb)) {
              const Action* g = find(Act::B, s, mb) ? find(Act::B, s, mb) : find(Act::W, s, mb);
              fail_at(source_, a, fmt::format("it reduces stage {}'s weight grads, but microbatch {}'s ('{}', column {}) "
                                              "comes after it",
                                              s, mb, g->cell, g->col + 1));
            }
          break;
      }
      done.insert(key_of(a));
    }
    if (!comms_) return;
    // Every output that another rank consumes is sent from this row.
    for (const Action& a : rows_[r]) {
      if (a.act == Act::F && a.stage + 1 < stages_ && map_[a.stage + 1] != r && !did(Act::SendF, a.stage, a.mb))
        fail_at(source_, a, fmt::format("stage {} is on rank {}, but this row has no '{}' after it", a.stage + 1,
                                        map_[a.stage + 1], cell_text(a.stage, Act::SendF, a.mb)));
      if ((a.act == Act::B || a.act == Act::I) && a.stage > 0 && map_[a.stage - 1] != r && !did(Act::SendB, a.stage, a.mb))
        fail_at(source_, a, fmt::format("stage {} is on rank {}, but this row has no '{}' after it", a.stage - 1,
                                        map_[a.stage - 1], cell_text(a.stage, Act::SendB, a.mb)));
    }
  }

  void check_unsharded(const Action& a, std::map<int, bool>& unsharded) const {
    if (fsdp_stages_.count(a.stage) && !unsharded[a.stage])
      fail_at(source_, a, fmt::format("stage {} uses UNSHARD, and its weight is not unsharded here ('{}' before this cell)",
                                      a.stage, cell_text(a.stage, Act::Unshard, -1)));
  }

  // Every SEND has its RECV on the peer rank, and every RECV its SEND (PyTorch names the receiving stage:
  // sSEND_Fb pairs with (s+1)RECV_Fb, sSEND_Bb with (s-1)RECV_Bb).
  void check_matching() const {
    for (const auto& row : rows_)
      for (const Action& a : row) {
        const int s = a.stage, b = a.mb;
        int peer_stage = 0;
        Act peer_act = Act::F;
        switch (a.act) {
          case Act::SendF: peer_stage = s + 1, peer_act = Act::RecvF; break;
          case Act::RecvF: peer_stage = s - 1, peer_act = Act::SendF; break;
          case Act::SendB: peer_stage = s - 1, peer_act = Act::RecvB; break;
          case Act::RecvB: peer_stage = s + 1, peer_act = Act::SendB; break;
          default: continue;
        }
        const bool sends = a.act == Act::SendF || a.act == Act::SendB;
        if (peer_stage < 0 || peer_stage >= stages_) {
          if (a.act == Act::SendF || a.act == Act::RecvB)
            fail_at(source_, a, fmt::format("stage {} is the last stage: its output goes to the loss, and its output "
                                            "grad comes from it; nothing travels",
                                            s));
          fail_at(source_, a, "stage 0 reads the model input, and its input grad goes nowhere; nothing travels");
        }
        if (map_[peer_stage] == a.row)
          fail_at(source_, a, fmt::format("stage {} is on this rank too: nothing to {}", peer_stage, sends ? "send" : "receive"));
        if (!find(peer_act, peer_stage, b))
          fail_at(source_, a, fmt::format("no matching '{}' on rank {} (the row of stage {})",
                                          cell_text(peer_stage, peer_act, b), map_[peer_stage], peer_stage));
      }
  }

  // ---- building the schedule ----
  std::string where(const Action& a) const { return fmt::format("{}:{}:{}", source_, a.row + 1, a.col + 1); }

  Schedule build() {
    Schedule sched;
    ScheduleHeader& h = sched.header;
    h.world_size = world_;
    h.layers = stages_;
    h.microbatches = m_;
    h.cost_model = "unit";
    h.p2p = P2PMode::PerPairChannel;
    h.stage_map = map_;
    // One group per rank that runs FSDP actions: the ranks that hold its stages (one rank: a stage is never on two).
    std::vector<int> group_of(world_, 0);
    for (const auto& row : rows_)
      for (const Action& a : row)
        if ((a.act == Act::Unshard || a.act == Act::Reshard || a.act == Act::ReduceGrad) && group_of[a.row] == 0) {
          h.groups.push_back({a.row});
          group_of[a.row] = static_cast<int>(h.groups.size());
        }
    if (!comms_) plan_receives();
    sched.ranks.resize(world_);
    for (int r = 0; r < world_; ++r) sched.ranks[r] = insert_frees(build_row(r, group_of[r]));
    return sched;
  }

  // The compute actions a compute action waits for (F, B, I or W of the same or the neighbouring stage).
  std::vector<const Action*> deps(const Action& a) const {
    const int s = a.stage, b = a.mb;
    std::vector<const Action*> d;
    switch (a.act) {
      case Act::F:
        if (s > 0) d.push_back(find(Act::F, s - 1, b));
        break;
      case Act::B:
      case Act::I:
        d.push_back(find(Act::F, s, b));
        if (s + 1 < stages_) d.push_back(find(Act::B, s + 1, b) ? find(Act::B, s + 1, b) : find(Act::I, s + 1, b));
        break;
      case Act::W: d.push_back(find(Act::I, s, b)); break;
      default: break;
    }
    return d;
  }

  // Compute-only: where each rank receives what other ranks send it. First the compute actions run in unit
  // steps, each rank taking its next cell once its inputs exist: a schedule that cannot run at all is
  // refused here with its rows and columns. An OVERLAP_F_B cell runs as one step, as PyTorch's lowering
  // (_add_send_recv) schedules it once every sub-action's input is there and its outputs leave after the
  // whole cell. Then the receive of message k of a (sender, receiver) pair goes right before the compute
  // that reads it, or earlier where a later message of the pair is read first (NCCL matches a pair's
  // messages in order). A receive only posts on its own stream (recv_stream), and sends never wait, so no
  // placement of receives can block a rank.
  void plan_receives() {
    std::vector<std::vector<const Action*>> comp(world_);
    std::map<const Action*, int> index_in_row;
    for (int r = 0; r < world_; ++r)
      for (const Action& a : rows_[r])
        if (is_compute_act(a.act)) {
          index_in_row[&a] = static_cast<int>(comp[r].size());
          comp[r].push_back(&a);
        }
    std::map<const Action*, int> step_of;
    std::vector<std::size_t> next(world_, 0);
    std::size_t remaining = 0;
    for (const auto& c : comp) remaining += c.size();
    for (int step = 0; remaining > 0; ++step) {
      std::vector<const Action*> ran;
      for (int r = 0; r < world_; ++r) {
        if (next[r] >= comp[r].size()) continue;
        const std::size_t end = cell_end(comp[r], next[r]);
        bool ready = true;
        for (std::size_t j = next[r]; j < end; ++j)
          for (const Action* d : deps(*comp[r][j]))
            ready = ready && (step_of.count(d) || in_cell(comp[r], next[r], j, d));
        if (ready)
          for (std::size_t j = next[r]; j < end; ++j) ran.push_back(comp[r][j]);
      }
      if (ran.empty()) report_deadlock(comp, next, step_of);
      for (const Action* a : ran) {
        step_of[a] = step;
        ++next[a->row];
        --remaining;
      }
    }
    // Messages per pair, in send order.
    struct Message {
      Tensor tensor;
      int send_step;
      int consumer;  // index of the consuming compute in the receiver's row
      std::string where;
    };
    std::map<std::pair<int, int>, std::vector<Message>> channels;
    for (int r = 0; r < world_; ++r)
      for (const Action* a : comp[r]) {
        const int s = a->stage, b = a->mb;
        if (a->act == Act::F && s + 1 < stages_ && map_[s + 1] != r) {
          const Action* c = find(Act::F, s + 1, b);
          channels[{r, map_[s + 1]}].push_back({activation_tensor(s + 1, {b}), step_of[a], index_in_row[c], where(*c)});
        }
        if ((a->act == Act::B || a->act == Act::I) && s > 0 && map_[s - 1] != r) {
          const Action* c = find(Act::B, s - 1, b) ? find(Act::B, s - 1, b) : find(Act::I, s - 1, b);
          channels[{r, map_[s - 1]}].push_back({activation_grad_tensor(s, {b}), step_of[a], index_in_row[c], where(*c)});
        }
      }
    for (auto& [pair, msgs] : channels) {
      const auto& [src, dst] = pair;
      std::vector<int> pos(msgs.size());
      for (std::size_t k = 0; k < msgs.size(); ++k) pos[k] = msgs[k].consumer;
      for (std::size_t k = msgs.size(); k-- > 1;) pos[k - 1] = std::min(pos[k - 1], pos[k]);  // in channel order
      for (std::size_t k = 0; k < msgs.size(); ++k)
        receives_[dst].push_back({pos[k], msgs[k].send_step, src, static_cast<int>(k), msgs[k].tensor, msgs[k].where});
    }
    for (auto& rs : receives_)
      std::sort(rs.second.begin(), rs.second.end(), [](const PlannedRecv& x, const PlannedRecv& y) {
        return std::tie(x.before, x.send_step, x.src, x.seq) < std::tie(y.before, y.send_step, y.src, y.seq);
      });
  }

  // One past the last compute of the cell that starts at `row[begin]` (the sub-actions of an OVERLAP_F_B
  // cell share its column).
  static std::size_t cell_end(const std::vector<const Action*>& row, std::size_t begin) {
    std::size_t end = begin + 1;
    while (end < row.size() && row[end]->col == row[begin]->col) ++end;
    return end;
  }

  // True when `d` is a sub-action before `row[j]` in the cell that starts at `row[begin]`.
  static bool in_cell(const std::vector<const Action*>& row, std::size_t begin, std::size_t j, const Action* d) {
    for (std::size_t k = begin; k < j; ++k)
      if (row[k] == d) return true;
    return false;
  }

  [[noreturn]] void report_deadlock(const std::vector<std::vector<const Action*>>& comp, const std::vector<std::size_t>& next,
                                    const std::map<const Action*, int>& done) const {
    std::string why;
    for (int r = 0; r < world_; ++r) {
      if (next[r] >= comp[r].size()) continue;
      const std::size_t end = cell_end(comp[r], next[r]);
      bool named = false;
      for (std::size_t j = next[r]; j < end && !named; ++j) {
        const Action* a = comp[r][j];
        for (const Action* d : deps(*a))
          if (!done.count(d) && !in_cell(comp[r], next[r], j, d)) {
            why += fmt::format("\n  row {} (rank {}), column {}, cell '{}' waits for '{}' (rank {}, column {})", r + 1, r,
                               a->col + 1, a->cell, d->cell, d->row, d->col + 1);
            named = true;
            break;
          }
      }
    }
    throw std::invalid_argument(fmt::format("{}: the schedule cannot run: each rank waits for another{}", source_, why));
  }

  std::vector<Op> build_row(int r, int group) {
    std::vector<Op> ops;
    std::map<int, std::optional<Tensor>> acc;     // stage -> weight grad accumulated so far
    auto push = [&](Op op, const std::string& at) {
      op.rank = r;
      op.where = at;
      ops.push_back(std::move(op));
    };
    auto send = [&](int dst, const Tensor& t, const std::string& at) {
      Op op;
      op.kind = OpKind::Send;
      op.peer = dst;
      op.stream = kSendStream;
      op.reads = {t};
      push(std::move(op), at);
    };
    auto recv = [&](int src, const Tensor& t, const std::string& at) {
      Op op;
      op.kind = OpKind::Recv;
      op.peer = src;
      op.stream = recv_stream(src);
      op.writes = {t};
      push(std::move(op), at);
    };
    // Compute-only: the receives planned before this row's compute number `j` (plan_receives).
    std::size_t next_planned = 0;
    const std::vector<PlannedRecv>* planned = receives_.count(r) ? &receives_.at(r) : nullptr;
    auto receive_before = [&](int j) {
      while (planned && next_planned < planned->size() && (*planned)[next_planned].before <= j) {
        const PlannedRecv& p = (*planned)[next_planned++];
        recv(p.src, p.tensor, p.where);
      }
    };
    int compute_index = 0;
    auto accumulate = [&](int s, const Tensor& g, const std::string& at) {
      auto& a = acc[s];
      if (!a) {
        a = g;
        return;
      }
      Op op;
      op.kind = OpKind::Accumulate;
      op.reads = {*a, g};
      Tensor sum_t = sum(*a, g);
      op.writes = {sum_t};
      push(std::move(op), at);
      a = sum_t;
    };
    auto collective = [&](OpKind kind, int s, const Tensor& t, const std::string& at) {
      Op op;
      op.kind = kind;
      op.layer = s;
      op.group = group;
      op.reads = {t};
      op.writes = {t};  // over the one rank that holds the stage, the collective gives its input back
      push(std::move(op), at);
    };

    std::vector<int> owned;
    for (int s = 0; s < stages_; ++s)
      if (map_[s] == r) owned.push_back(s);
    if (!owned.empty()) {
      Op load;
      load.kind = OpKind::Load;
      for (int s : owned) {
        load.writes.push_back(weight_tensor(s));
        load.writes.push_back(opt_state_tensor(s));
      }
      push(std::move(load), fmt::format("{}:{}", source_, r + 1));
    }
    // Compute-only: the sends of an OVERLAP_F_B cell's sub-actions go after its last sub-action's pass, in
    // sub-action order, as PyTorch's lowering (_add_send_recv) places them and its runtime posts them.
    std::vector<std::pair<int, Tensor>> deferred;
    const std::vector<Action>& row = rows_[r];
    for (std::size_t k = 0; k < row.size(); ++k) {
      const Action& a = row[k];
      const int s = a.stage, b = a.mb;
      const std::string at = where(a);
      const bool more_in_cell = k + 1 < row.size() && row[k + 1].col == a.col;  // an overlapped pair's first half
      auto flush = [&] {
        if (more_in_cell) return;
        for (const auto& [dst, t] : deferred) send(dst, t, at);
        deferred.clear();
      };
      auto send_output = [&](int dst, const Tensor& t) {
        if (more_in_cell) deferred.emplace_back(dst, t);
        else send(dst, t, at);
      };
      if (is_compute_act(a.act)) receive_before(compute_index++);
      switch (a.act) {
        case Act::F:
          if (s == 0) {
            Op load;
            load.kind = OpKind::Load;
            load.writes = {activation_tensor(0, {b})};
            push(std::move(load), at);
          }
          push(compute(OpKind::Forward, r, s, {b}, stages_, m_), at);
          if (s + 1 == stages_) push(compute(OpKind::Loss, r, s, {b}, stages_, m_), at);
          flush();
          if (!comms_ && s + 1 < stages_ && map_[s + 1] != r) send_output(map_[s + 1], activation_tensor(s + 1, {b}));
          break;
        case Act::B:
        case Act::I:
          push(compute(a.act == Act::B ? OpKind::Backward : OpKind::BackwardInput, r, s, {b}, stages_, m_), at);
          flush();
          if (!comms_ && s > 0 && map_[s - 1] != r) send_output(map_[s - 1], activation_grad_tensor(s, {b}));
          if (a.act == Act::B) accumulate(s, weight_grad_tensor(s, {b}), at);
          break;
        case Act::W:
          push(compute(OpKind::BackwardWeight, r, s, {b}, stages_, m_), at);
          flush();
          accumulate(s, weight_grad_tensor(s, {b}), at);
          break;
        case Act::SendF: send(map_[s + 1], activation_tensor(s + 1, {b}), at); break;
        case Act::RecvF: recv(map_[s - 1], activation_tensor(s, {b}), at); break;
        case Act::SendB: send(map_[s - 1], activation_grad_tensor(s, {b}), at); break;
        case Act::RecvB: recv(map_[s + 1], activation_grad_tensor(s + 1, {b}), at); break;
        case Act::Unshard: collective(OpKind::AllGather, s, weight_tensor(s), at); break;
        case Act::Reshard: {
          Op op;
          op.kind = OpKind::Free;
          op.reads = {weight_tensor(s)};  // the gathered copy; the loaded weight stays
          push(std::move(op), at);
          break;
        }
        case Act::ReduceGrad:
          collective(OpKind::ReduceScatter, s, weight_grad_tensor(s, IdSet::range(0, m_)), at);
          break;
      }
    }
    receive_before(compute_index + 1);  // (none are left: each message is read by a compute)
    for (int s : owned) push(compute(OpKind::Update, r, s, {}, stages_, m_), fmt::format("{}:{}", source_, r + 1));
    return ops;
  }

  // Frees every activation, activation grad and weight grad right after the last op that touches it (weights
  // and optimizer state stay, apart from RESHARD's explicit frees).
  static std::vector<Op> insert_frees(std::vector<Op> ops) {
    auto tracked = [](const Tensor& t) { return t.kind != TensorKind::Weight && t.kind != TensorKind::OptState; };
    std::map<Tensor, std::size_t> last;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind == OpKind::Free) continue;
      for (const Tensor& t : ops[i].reads) last[t] = i;
      for (const Tensor& t : ops[i].writes) last[t] = i;
    }
    std::map<Tensor, int> count;
    std::vector<Op> out;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      Op op = std::move(ops[i]);
      if (op.kind == OpKind::Free) {
        for (const Tensor& t : op.reads) --count[t];
      } else {
        for (const Tensor& t : op.writes) ++count[t];
      }
      Op free_op;
      free_op.kind = OpKind::Free;
      free_op.rank = op.rank;
      free_op.where = op.where;
      auto consider = [&](const Tensor& t) {
        if (!tracked(t) || last[t] != i) return;
        int& n = count[t];
        for (; n > 0; --n) free_op.reads.push_back(t);
      };
      if (op.kind != OpKind::Free) {
        for (const Tensor& t : op.reads) consider(t);
        for (const Tensor& t : op.writes) consider(t);
      }
      out.push_back(std::move(op));
      if (!free_op.reads.empty()) out.push_back(std::move(free_op));
    }
    return out;
  }

  std::string source_;
  int given_m_ = 0;
  std::vector<int> map_;
  std::vector<std::vector<Action>> rows_;
  int world_ = 0;
  int stages_ = 0;
  int m_ = 0;
  bool comms_ = false;
  std::set<int> fsdp_stages_;
  std::map<Key, const Action*> where_;
  std::map<int, std::vector<PlannedRecv>> receives_;  // compute-only: receiving rank -> its receives
};

}  // namespace

int v_style_rank(int stage, int ranks) {
  const int sweep = stage / ranks, at = stage % ranks;
  return sweep % 2 == 0 ? at : ranks - 1 - at;
}

Schedule import_pytorch_csv(const std::string& csv, int microbatches, std::vector<int> stage_map, const std::string& source) {
  return Importer(csv, microbatches, std::move(stage_map), source).run();
}

}  // namespace trainsim
