// The stream engine: simulates a schedule with GPU stream semantics (DESIGN §2), for every cost model but
// `puzzle` (whose blocking rules stay in the coroutine World, sim/world.h).
//
// A rank issues its ops in program order and never blocks on another rank. Each op runs on its stream
// (0 = compute, 1.. = communication), first in first out, and starts when its stream is free and the ops
// it depends on have ended:
// - the op that wrote each tensor it reads (on its rank);
// - for a send or a collective on a communication stream, the op issued before it on the compute stream
//   (stream 0): ProcessGroupNCCL makes its NCCL stream wait for the compute stream at each isend and
//   collective (syncStream), so a message leaves once the compute issued before it has ended (PyTorch's
//   OVERLAP_F_B cells send after both passes, docs/pytorch-csv.md), and where a collective is issued bounds
//   how far it runs ahead of the compute (an FSDP all-gather prefetched after the compute that frees its slot);
// - for a free, every earlier op that used the tensor (memory is released when its last user ends); a free
//   holds nothing up: the next op on its stream waits for the op before the free, not for the free;
// - for a recv, the matched send (the k-th send from `src` to `dst` is the k-th recv from `src` on `dst`, as
//   NCCL matches; a `recv from any` is matched to the one rank that sends that tensor): a send is eager (as
//   NCCL isend with a buffer: it never waits for the receiver) and the recv starts once the send has ended;
// - for a collective, the rank's previous collective over the same group, on whatever stream (a group is one
//   NCCL communicator, whose operations NCCL runs one at a time in launch order), and every member's call at the
//   same position of the group's sequence: it starts when the last member is ready and ends at the same time on
//   every member.
// So a `recv` only posts the receive: the compute that reads the message waits for it, and ops on other
// streams go on meanwhile. Compute and communication overlap only across streams.
//
// Times are a longest path over that dependency graph. A dependency that can never be met (a cycle of
// waits, a recv without a send, a collective a member never calls) is a deadlock, reported with each blocked
// rank's first unfinished op, what it waits for, and the wait-for cycle between ranks.
//
// Memory: a tensor is resident from the start of the op that writes it (loads: when the stream reaches them)
// until its free takes effect; an op's memory sample counts what is resident on its rank just before it
// starts (events at the same time count when they come earlier in program order).
#pragma once

#include "schedules/rank_source.h"
#include "schedules/replay.h"

namespace trainsim {

/// Simulates `schedule` with stream semantics and its header's cost model (not `puzzle`): validates the op
/// algebra and residency in program order, matches sends with receives and collective calls, times every op,
/// samples memory and checks that every layer is updated exactly once (schedules/update_check.h). Never throws for a bad schedule: the first problem goes into the result, naming the
/// rank, the op and its file:line. Throws std::invalid_argument for an unknown cost model.
SimResult simulate_streams(const Schedule& schedule, const SimOptions& options = {});
/// The same for a schedule read one rank at a time. With a source that makes each rank's ops when asked
/// (RankSource::holds_all() false), the engine holds one rank's ops at a time: what it keeps of an op after
/// issuing it is its node (times, kind, stream, duration, dependencies; about 70 bytes), and a valid run or one
/// over the memory limit is reported from that alone. Any other problem (and a receive from any source, or a
/// group not listed in rank order) is reported by simulating every rank's ops held at once, in the same words.
SimResult simulate_streams(const RankSource& source, const SimOptions& options = {});

}  // namespace trainsim
