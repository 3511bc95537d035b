// Exporting a Schedule as PyTorch pipelining's schedule CSV (docs/pytorch-csv.md): one row per rank, one
// action per cell, compute-only or compute+comms.
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "schedules/defaults.h"
#include "interop/pytorch_csv.h"
#include "interop/pytorch_csv_cells.h"

namespace trainsim {

namespace {

using namespace csv;



int single_batch(const Op& op, const IdSet& batches) {
  if (batches.size() != 1)
    throw std::invalid_argument(fmt::format("{}: works on {} microbatches at once ({{{}}}); a PyTorch CSV action has "
                                            "exactly one",
                                            op.label(), batches.size(), batches.str()));
  return batches.first();
}

const Tensor& payload(const Op& op) {
  const auto& ts = op.kind == OpKind::Recv ? op.writes : op.reads;
  if (ts.size() != 1) throw std::invalid_argument(fmt::format("{}: carries {} tensors; a CSV action carries one", op.label(), ts.size()));
  return ts.front();
}

// SEND_F / RECV_F / SEND_B / RECV_B for a point-to-point op, or throws.
std::string p2p_cell(const Op& op, int layers) {
  const Tensor& t = payload(op);
  const bool send = op.kind == OpKind::Send;
  int b = single_batch(op, t.batches);
  auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format("{}: {} {} has no PyTorch CSV action: {}", op.label(), send ? "sending" : "receiving",
                                             t.str(), why));
  };
  if (t.kind == TensorKind::Activation) {
    if (t.layer < 1 || t.layer >= layers) throw bad("only activations between two stages travel (A1..A" + std::to_string(layers - 1) + ")");
    return send ? cell_text(t.layer - 1, Act::SendF, b) : cell_text(t.layer, Act::RecvF, b);
  }
  if (t.kind == TensorKind::ActivationGrad) {
    if (t.layer < 1 || t.layer >= layers) throw bad("only activation grads between two stages travel (dA1..dA" + std::to_string(layers - 1) + ")");
    return send ? cell_text(t.layer, Act::SendB, b) : cell_text(t.layer - 1, Act::RecvB, b);
  }
  throw bad("PyTorch pipelines send only activations (SEND_F) and their grads (SEND_B)");
}

}  // namespace

std::string export_pytorch_csv(const Schedule& schedule, CsvForm form) {
  const ScheduleHeader& h = schedule.header;
  if (h.stage_map.empty())
    throw std::invalid_argument(
        "the schedule has no stage map (a 'stage_map' header line giving each stage's rank); PyTorch's CSV places one "
        "stage per layer on one rank (trainsim convert --stage-map gives one)");
  const bool comms = form == CsvForm::ComputeComms;
  std::string out;
  for (std::size_t rank = 0; rank < schedule.ranks.size(); ++rank) {
    const auto& ops = schedule.ranks[rank];
    std::vector<std::string> cells;
    std::map<int, int> gathered;  // layer -> gathered weight copies not yet freed
    for (const Op& op : ops) {
      switch (op.kind) {
        case OpKind::Forward:
        case OpKind::Backward:
        case OpKind::BackwardInput:
        case OpKind::BackwardWeight: {
          // A CSV row is one rank and a stage lives on one row: a stage replicated or sharded over several ranks
          // (data parallelism, pp-fsdp with --dp above 1) would import as a stage on two ranks, and is refused.
          if (op.layer >= 0 && static_cast<std::size_t>(op.layer) < h.stage_map.size() &&
              h.stage_map[op.layer] != static_cast<int>(rank))
            throw std::invalid_argument(fmt::format(
                "{}: the stage map puts stage {} on rank {}; a PyTorch CSV holds each stage on one rank (it cannot "
                "say that a stage is replicated or sharded over several)",
                op.label(), op.layer, h.stage_map[op.layer]));
          Act a = op.kind == OpKind::Forward ? Act::F : op.kind == OpKind::Backward ? Act::B
                  : op.kind == OpKind::BackwardInput ? Act::I : Act::W;
          cells.push_back(cell_text(op.layer, a, single_batch(op, op.batches)));
          break;
        }
        case OpKind::Send:
        case OpKind::Recv:
          if (comms) cells.push_back(p2p_cell(op, h.layers));
          break;
        case OpKind::AllGather: {
          const Tensor& t = payload(op);
          if (t.kind != TensorKind::Weight)
            throw std::invalid_argument(fmt::format("{}: all-gather of {} has no PyTorch CSV action (UNSHARD gathers a "
                                                    "stage's weight)",
                                                    op.label(), t.str()));
          int layer = op.layer >= 0 ? op.layer : t.layer;
          ++gathered[layer];
          if (comms) cells.push_back(cell_text(layer, Act::Unshard, -1));
          break;
        }
        case OpKind::Free:
          for (const Tensor& t : op.reads)
            if (t.kind == TensorKind::Weight && t.complete() && gathered[t.layer] > 0) {
              --gathered[t.layer];
              if (comms) cells.push_back(cell_text(t.layer, Act::Reshard, -1));
            }
          break;
        case OpKind::ReduceScatter:
        case OpKind::AllReduce: {
          if (!comms) break;
          const Tensor& t = payload(op);
          if (t.kind != TensorKind::WeightGrad)
            throw std::invalid_argument(fmt::format("{}: {} of {} has no PyTorch CSV action (REDUCE_GRAD reduces a "
                                                    "stage's weight grads)",
                                                    op.label(), op_name(op.kind), t.str()));
          cells.push_back(cell_text(op.layer >= 0 ? op.layer : t.layer, Act::ReduceGrad, -1));
          break;
        }
        case OpKind::AllToAll:
          throw std::invalid_argument(fmt::format("{}: a PyTorch CSV has no action for an all-to-all (expert "
                                                  "parallelism's dispatch and combine are inside a stage's forward "
                                                  "and backward)",
                                                  op.label()));
        case OpKind::Broadcast:
        case OpKind::Reduce:
          // (PyTorch's pipelining actions gather and reduce a stage's own shards; a weight owned whole by one
          // rank and sent to the others, or grads summed onto it, have no action.)
          throw std::invalid_argument(fmt::format("{}: a PyTorch CSV has no action for a {} (its actions are "
                                                  "UNSHARD, RESHARD and REDUCE_GRAD of a stage's own shards)",
                                                  op.label(), op_name(op.kind)));
        default: break;  // load, loss, update, accumulate, barrier: no CSV action
      }
    }
    std::string row;
    for (const auto& c : cells) row += (row.empty() ? "" : ",") + c;
    out += row + "\n";
  }
  return out;
}

}  // namespace trainsim
