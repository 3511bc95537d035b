#include "schedules/replay.h"

#include <fmt/format.h>

#include "sim/algebra.h"
#include "schedules/stream_sim.h"
#include "schedules/update_check.h"
#include "sim/rank.h"

namespace trainsim {

namespace {

// One rank's program: execute its ops in order.
Task interpret(World& world, const Schedule& s, int rank) {
  MemoryLedger& ledger = world.ledger(rank);
  const ScheduleHeader& h = s.header;
  for (const Op& op : s.ranks[rank]) {
    if (std::string p = algebra_problem(op, h.layers, h.microbatches); !p.empty()) throw op_error(op, p);
    for (const Tensor& t : op.reads)
      if (ledger.count(t) == 0)
        throw op_error(op, fmt::format("it reads {} ({}), which is not resident; resident: {}", t.str(),
                                       long_name(t.kind), ledger.summary()));
    switch (op.kind) {
      case OpKind::Load:
      case OpKind::Accumulate:
        for (const Tensor& t : op.writes) ledger.add(t);
        break;
      case OpKind::Free:
        for (const Tensor& t : op.reads) ledger.remove(t);
        break;
      case OpKind::Forward:
      case OpKind::Backward:
      case OpKind::BackwardInput:
      case OpKind::BackwardWeight:
      case OpKind::Loss:
      case OpKind::Update:
        world.execute(op);
        for (const Tensor& t : op.writes) ledger.add(t);
        break;
      case OpKind::Send: {
        Tensor payload = op.reads.front();
        co_await world.send(op, std::move(payload));
        break;
      }
      case OpKind::Recv: {
        Message m = co_await world.recv(op);
        const Tensor& want = op.writes.front();
        if (m.payload != want)
          throw op_error(op, fmt::format("expected {} but rank {} sent {}{}", want.str(), m.src, m.payload.str(),
                                         m.where.empty() ? std::string() : fmt::format(" ({})", m.where)));
        ledger.add(m.payload);
        break;
      }
      case OpKind::AllGather:
      case OpKind::ReduceScatter:
      case OpKind::AllReduce:
      case OpKind::Barrier:
      case OpKind::Broadcast:
      case OpKind::Reduce:
      case OpKind::AllToAll: {
        Tensor input = op.reads.empty() ? Tensor{} : op.reads.front();
        Tensor out = co_await world.collective(op, std::move(input));
        if (!op.writes.empty()) {
          if (out != op.writes.front())
            throw op_error(op, fmt::format("it expects {} but the {} gives {}", op.writes.front().str(),
                                           op_name(op.kind), out.str()));
          ledger.add(out);
        }
        break;
      }
    }
  }
}

}  // namespace

SimResult simulate(const Schedule& schedule, const SimOptions& options) {
  if (schedule.header.cost_model != "puzzle") {
    // Stream semantics (schedules/stream_sim.h); the puzzles keep their blocking rules below.
    return simulate_streams(schedule, options);  // (the updates checked there too)
  }
  auto cost = make_cost_model(schedule.header.cost_model);
  cost->set_expert_load(schedule.header.expert_load);
  const ScheduleHeader& h = schedule.header;
  SimResult result;
  WorldOptions wo;
  wo.world_size = h.world_size;
  wo.layers = h.layers;
  wo.batches = h.microbatches;
  wo.p2p = h.p2p;
  wo.memory_limit = options.memory_limit;
  World world(wo, *cost);
  try {
    if (static_cast<int>(schedule.ranks.size()) != h.world_size)
      throw SimError(fmt::format("the schedule has op lists for {} ranks but world_size is {}", schedule.ranks.size(),
                                 h.world_size));
    for (const auto& g : h.groups) world.add_group(g);
    for (int r = 0; r < h.world_size; ++r) world.spawn(r, interpret(world, schedule, r));
    world.run();
    UpdateCheck updates(h.layers);
    for (const auto& ops : schedule.ranks)
      for (const Op& op : ops)
        if (op.kind == OpKind::Update || op.kind == OpKind::Load) updates.add(op);
    updates.finish();
    result.ok = true;
  } catch (const DeadlockError& e) {
    result.error = e.what();
    result.blocked = world.blocked_ranks();
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  result.trace = world.trace();
  result.summary = result.trace.summary();
  result.op_count = schedule.op_count();
  return result;
}

SimResult simulate(const RankSource& source, const SimOptions& options) {
  if (source.header().cost_model != "puzzle") return simulate_streams(source, options);
  return simulate(RankSource::collect(source), options);
}

}  // namespace trainsim
