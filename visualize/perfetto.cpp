// Chrome / Perfetto trace JSON (Trace Event Format, object form) of a simulated run.
//
// Conventions (loadable by ui.perfetto.dev and chrome://tracing):
// - Time: ts and dur are microseconds (1 simulated second = 1e6 us), written as integers when the
//   nanosecond Time is a whole number of microseconds, else as a fraction.
// - Processes: one per rank, pid = rank + 1 (Perfetto treats pid 0 as the kernel's idle process), named
//   "rank N" ("M" process_name) and ordered by rank ("M" process_sort_index, sort_index = rank).
// - Threads: one per stream a rank uses, named "compute" (stream 0) or "comm N" (stream N), ordered by
//   stream. Perfetto's JSON importer names threads by tid alone, so tids are unique over the whole trace:
//   tid = rank * S + stream + 1 with S = 1 + the highest stream in the trace (with every op on stream 0,
//   tid == pid: the rank's main thread).
// - Exposed communication (sim/exposed_comm.h: the rank's communication running while none of its compute
//   runs), when the trace poses the question (marks_exposed_comm: not the puzzle model, and some
//   communication takes time): per rank one more thread, "exposed comm", tid = R * S + rank + 1 with R the
//   number of ranks (after every stream's tid, so unique and leaving the stream tids as they are), sorted
//   after the rank's streams (sort_index S), with one complete event per exposed interval: name "exposed
//   comm", cat "exposed-comm", ts and dur the interval's, no args. They follow the rank's op events.
// - Ops: one complete event ("ph":"X") per timed op (is_timed), name = op_name + " L<layer>" ("forward
//   L2"; no suffix without a layer), cat = "compute", "p2p", "tp-collective" (is_tp_collective: the TP
//   all-reduce of partial sums, sequence parallelism's reduce-scatter and all-gather), "ep-collective" (expert
//   parallelism's all-to-all) or "collective";
//   zero-duration ops (loss, and
//   every non-compute op under the unit cost model) are X events with dur 0. Untimed ops (load, free,
//   accumulate) are thread-scoped instant events ("ph":"i", "s":"t", cat "memory"). args: batches (id
//   set text, "" when none), reads and writes (tensor names), memory (resident at the op's start, in
//   otherData.memory_unit), where, and per kind: peer (p2p), group (collectives), root (broadcast, reduce),
//   shards (when sharded).
// - TP communication inside compute ops (perfetto_trace_json's cost model given; visualize/timeline_tp_inside.h):
//   a compute op whose inner_comm is above 0 gets args.tp_comm_inside_us (microseconds, as ts), and right after
//   its X event a nested X event on the same thread: name "TP comm inside", cat "tp-collective", ts = the op's
//   end less that time, dur = that time, no args. Its length is the figure; the timeline draws it at the op's
//   end as well. Without a cost model, or without TP, no such event or arg.
// - Messages: a flow from each send to its receive: "s" on the sender's thread at the send's ts and "f"
//   (bp "e", bound to the enclosing slice) on the receiver's thread at the receive's ts, with a shared id
//   (1, 2, ... in the order of the senders' ranks and ops), name "message" and cat "p2p". The k-th send
//   from a to b matches the k-th receive on b whose peer is a (recorded receives name their source).
//   Each flow event comes right after its op's X event in the file, so importers that resolve equal
//   timestamps in file order bind it to that op.
// - Memory: a counter track per rank ("ph":"C", name "memory", args {<memory_unit>: value}, e.g.
//   {"units": 16384}) with a sample at the start of each timed op (the ops the simulator samples memory
//   for) and a final sample at the end of the rank's last op holding the last op's memory.
// - otherData: generator, world_size, layers, batches, cost_model, memory_unit, makespan_us, timesteps_us.
// - Several steps (perfetto_steps_json, a replay's measured steps): the steps follow each other on one
//   timeline, each at its start; every op event (X and i) has args.step, the 0-based training step; the
//   flows match sends to receives over the whole file (in order per pair, so within each step); makespan_us
//   and timesteps_us are those of the whole timeline, and otherData.steps lists each step as {"step",
//   "start_us", "makespan_us"} (its own makespan: the end of its last op after its start), with
//   otherData.step_makespan_median_us their median (the mean of the two middle ones for an even count).
//   Readers that know one step only (no otherData.steps) see a trace of the whole timeline.
// Events are written in a fixed order (metadata, then per rank per op), one per line, so the same trace
// always gives byte-identical text.
#include "visualize/perfetto.h"

#include <span>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/exposed_comm.h"
#include "sim/tp_ops.h"
#include "visualize/timeline_tp_inside.h"

namespace trainsim::visualize {

namespace {

using Json = nlohmann::ordered_json;

/// Microseconds of a Time: an integer when exact, else a fraction.
Json micros(Time t) {
  if (t % 1000 == 0) return Json(static_cast<std::int64_t>(t / 1000));
  return Json(static_cast<double>(t) / 1000.0);
}

const char* category(const Op& op) {
  const OpKind k = op.kind;
  if (is_p2p(k)) return "p2p";
  if (is_tp_collective(op)) return "tp-collective";
  if (k == OpKind::AllToAll) return "ep-collective";
  if (is_collective(k)) return "collective";
  if (is_compute(k)) return "compute";
  return "memory";
}

std::string event_name(const Op& op) {
  std::string s = op_name(op.kind);
  if (op.layer >= 0) s += " L" + std::to_string(op.layer);
  return s;
}

Json tensor_names(std::span<const Tensor> ts) {
  Json a = Json::array();
  for (const auto& t : ts) a.push_back(t.str());
  return a;
}

Json op_args(const OpRun& run) {
  const Op& op = run.op;
  Json args = Json::object();
  args["batches"] = op.batches.str();
  args["reads"] = tensor_names(op.reads);
  args["writes"] = tensor_names(op.writes);
  args["memory"] = run.memory;
  args["where"] = op.where;
  if (is_p2p(op.kind)) args["peer"] = op.peer;
  if (is_collective(op.kind)) args["group"] = op.group;
  if (is_rooted(op.kind)) args["root"] = op.peer;
  if (op.num_shards > 1 || !(op.shards.empty() || op.shards == IdSet{0}))
    args["shards"] = op.shards.str() + "/" + std::to_string(op.num_shards);
  return args;
}

// The trace's JSON; `step_of[rank][i]` (when not empty) is op i's step, written as args.step, and `more`
// goes into otherData after the common fields.
std::string trace_json(const Trace& trace, const std::vector<std::vector<int>>& step_of, const Json& more,
                       const CostModel* cost = nullptr) {
  const int nranks = std::max(trace.world_size, static_cast<int>(trace.ranks.size()));
  const std::string unit = trace.memory_unit.empty() ? std::string("memory") : trace.memory_unit;

  int max_stream = 0;
  for (const auto& runs : trace.ranks)
    for (const auto& r : runs) max_stream = std::max(max_stream, r.op.stream);
  const long long stride = static_cast<long long>(max_stream) + 1;
  auto pid_of = [](int rank) { return static_cast<long long>(rank) + 1; };
  auto tid_of = [&](int rank, int stream) { return static_cast<long long>(rank) * stride + stream + 1; };
  const bool show_exposed = marks_exposed_comm(trace);
  auto exposed_tid_of = [&](int rank) { return static_cast<long long>(nranks) * stride + rank + 1; };

  // Match sends to receives: per (src, dst), the k-th send to the k-th receive naming src.
  // flow_out[rank][i] / flow_in[rank][i]: flow id of op i (0 = none).
  std::vector<std::vector<std::uint64_t>> flow_out(trace.ranks.size()), flow_in(trace.ranks.size());
  {
    std::map<std::pair<int, int>, std::vector<std::size_t>> recvs;  // (src, dst) -> recv indices on dst
    for (std::size_t b = 0; b < trace.ranks.size(); ++b) {
      flow_out[b].assign(trace.ranks[b].size(), 0);
      flow_in[b].assign(trace.ranks[b].size(), 0);
      for (std::size_t i = 0; i < trace.ranks[b].size(); ++i) {
        const Op& op = trace.ranks[b][i].op;
        if (op.kind == OpKind::Recv && op.peer >= 0) recvs[{op.peer, static_cast<int>(b)}].push_back(i);
      }
    }
    std::map<std::pair<int, int>, std::size_t> used;
    std::uint64_t next_id = 1;
    for (std::size_t a = 0; a < trace.ranks.size(); ++a)
      for (std::size_t i = 0; i < trace.ranks[a].size(); ++i) {
        const Op& op = trace.ranks[a][i].op;
        if (op.kind != OpKind::Send || op.peer < 0 || op.peer >= static_cast<int>(trace.ranks.size())) continue;
        std::pair<int, int> key{static_cast<int>(a), op.peer};
        auto it = recvs.find(key);
        std::size_t& k = used[key];
        if (it == recvs.end() || k >= it->second.size()) continue;  // unmatched (a run cut short)
        std::uint64_t id = next_id++;
        flow_out[a][i] = id;
        flow_in[static_cast<std::size_t>(op.peer)][it->second[k]] = id;
        ++k;
      }
  }

  std::string out;
  out.reserve(256 + trace.op_count() * 400);
  out += "{\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](const Json& e) {
    if (!first) out += ",\n";
    first = false;
    out += e.dump(-1, ' ', false, Json::error_handler_t::replace);  // (file names need not be UTF-8)
  };

  for (int rank = 0; rank < nranks; ++rank) {
    const std::vector<OpRun> empty;
    const auto& runs = rank < static_cast<int>(trace.ranks.size()) ? trace.ranks[rank] : empty;
    const long long pid = pid_of(rank);
    emit(Json{{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    emit(Json{{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", rank}}}});
    std::vector<int> streams{0};
    for (const auto& r : runs) streams.push_back(r.op.stream);
    std::sort(streams.begin(), streams.end());
    streams.erase(std::unique(streams.begin(), streams.end()), streams.end());
    for (int s : streams) {
      std::string tname = s == 0 ? std::string("compute") : "comm " + std::to_string(s);
      emit(Json{{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid_of(rank, s)},
                {"args", {{"name", tname}}}});
      emit(Json{{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", tid_of(rank, s)},
                {"args", {{"sort_index", s}}}});
    }
    if (show_exposed) {
      emit(Json{{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", exposed_tid_of(rank)},
                {"args", {{"name", "exposed comm"}}}});
      emit(Json{{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", exposed_tid_of(rank)},
                {"args", {{"sort_index", stride}}}});
    }

    for (std::size_t i = 0; i < runs.size(); ++i) {
      const OpRun& run = runs[i];
      const Op& op = run.op;
      const long long tid = tid_of(rank, op.stream);
      Json args = op_args(run);
      if (static_cast<std::size_t>(rank) < step_of.size() && i < step_of[rank].size()) args["step"] = step_of[rank][i];
      if (is_timed(op.kind)) {
        const Time inside = tp_inside(cost, run);
        if (inside > 0) args["tp_comm_inside_us"] = micros(inside);
        emit(Json{{"ph", "X"}, {"name", event_name(op)}, {"cat", category(op)}, {"pid", pid}, {"tid", tid},
                  {"ts", micros(run.start)}, {"dur", micros(run.end - run.start)}, {"args", std::move(args)}});
        if (inside > 0)
          emit(Json{{"ph", "X"}, {"name", "TP comm inside"}, {"cat", "tp-collective"}, {"pid", pid}, {"tid", tid},
                    {"ts", micros(run.end - inside)}, {"dur", micros(inside)}});
      } else {
        emit(Json{{"ph", "i"}, {"s", "t"}, {"name", event_name(op)}, {"cat", category(op)}, {"pid", pid},
                  {"tid", tid}, {"ts", micros(run.start)}, {"args", std::move(args)}});
      }
      if (static_cast<std::size_t>(rank) < flow_out.size()) {
        if (std::uint64_t id = flow_out[rank][i])
          emit(Json{{"ph", "s"}, {"id", id}, {"name", "message"}, {"cat", "p2p"}, {"pid", pid}, {"tid", tid},
                    {"ts", micros(run.start)}, {"bp", "e"}});
        if (std::uint64_t id = flow_in[rank][i])
          emit(Json{{"ph", "f"}, {"id", id}, {"name", "message"}, {"cat", "p2p"}, {"pid", pid}, {"tid", tid},
                    {"ts", micros(run.start)}, {"bp", "e"}});
      }
      if (is_timed(op.kind))
        emit(Json{{"ph", "C"}, {"name", "memory"}, {"pid", pid}, {"ts", micros(run.start)},
                  {"args", {{unit, run.memory}}}});
    }
    if (show_exposed)
      for (const TimeInterval& i : exposed_comm_intervals(runs))
        emit(Json{{"ph", "X"}, {"name", "exposed comm"}, {"cat", "exposed-comm"}, {"pid", pid},
                  {"tid", exposed_tid_of(rank)}, {"ts", micros(i.start)}, {"dur", micros(i.end - i.start)}});
    if (!runs.empty()) {
      Time last_end = 0;
      for (const auto& r : runs) last_end = std::max(last_end, r.end);
      emit(Json{{"ph", "C"}, {"name", "memory"}, {"pid", pid}, {"ts", micros(last_end)},
                {"args", {{unit, runs.back().memory}}}});
    }
  }

  Json other = Json::object();
  other["generator"] = "trainsim";
  other["world_size"] = trace.world_size;
  other["layers"] = trace.layers;
  other["batches"] = trace.batches;
  other["cost_model"] = trace.cost_model;
  other["memory_unit"] = trace.memory_unit;
  other["makespan_us"] = micros(trace.makespan());
  other["timesteps_us"] = micros(trace.timesteps());
  for (const auto& [key, value] : more.items()) other[key] = value;
  out += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":";
  out += other.dump(-1, ' ', false, Json::error_handler_t::replace);
  out += "}\n";
  return out;
}

}  // namespace

std::string perfetto_trace_json(const Trace& trace, const CostModel* cost) {
  return trace_json(trace, {}, Json::object(), cost);
}

std::string perfetto_steps_json(const std::vector<StepTrace>& steps, const nlohmann::json& extra) {
  if (steps.empty()) return perfetto_trace_json(Trace{});
  Trace all;
  const Trace& head = steps.front().trace;
  all.world_size = head.world_size, all.layers = head.layers, all.batches = head.batches;
  all.cost_model = head.cost_model, all.memory_unit = head.memory_unit;
  std::vector<std::vector<int>> step_of;
  Json list = Json::array();
  std::vector<Time> makespans;
  for (const StepTrace& st : steps) {
    if (all.ranks.size() < st.trace.ranks.size()) all.ranks.resize(st.trace.ranks.size());
    if (step_of.size() < st.trace.ranks.size()) step_of.resize(st.trace.ranks.size());
    all.world_size = std::max(all.world_size, st.trace.world_size);
    for (std::size_t r = 0; r < st.trace.ranks.size(); ++r)
      for (OpRun run : st.trace.ranks[r]) {
        run.start += st.start, run.end += st.start;
        all.ranks[r].push_back(std::move(run));
        step_of[r].push_back(st.step);
      }
    makespans.push_back(st.trace.makespan());
    list.push_back(Json{{"step", st.step}, {"start_us", micros(st.start)}, {"makespan_us", micros(makespans.back())}});
  }
  std::sort(makespans.begin(), makespans.end());
  const std::size_t n = makespans.size();
  const Time median = n % 2 ? makespans[n / 2] : (makespans[n / 2 - 1] + makespans[n / 2]) / 2;
  Json other{{"steps", list}, {"step_makespan_median_us", micros(median)}};
  if (extra.is_object())
    for (const auto& [k, v] : extra.items()) other[k] = v;
  return trace_json(all, step_of, other);
}

}  // namespace trainsim::visualize
