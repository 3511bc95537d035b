// ZeRO-3 sharded between tensors (the learning material's ZeRO-3 variant, the LLM Training Puzzles' weight-
// sharded data parallelism with NCCL's rooted collectives): dp ranks each run every layer on their own m
// microbatches (rank r: batches r*m .. r*m+m-1, one run, which its local grad sum covers before the reduce; the
// header's microbatches are dp*m). Layer l's weight and optimizer state are owned whole by rank l mod dp, which alone loads and
// updates them. Before each forward and each backward of layer l the owner broadcasts the weight over every
// rank (root l mod dp) and the others free their copy right after the pass; each rank sums its grads of
// layer l over its microbatches and, after its last backward of the layer, reduces the sum to the owner,
// which then holds the grad of every batch. Updates come last. With dp = 1 there is nothing to broadcast or
// reduce. The file is .sched version 2 (broadcast and reduce need it).
#include "schedules/generators/builder.h"

namespace trainsim::gen {

namespace {

// A broadcast or reduce of group 0 rooted at `root` (docs/schedule-format.md): `in` and `out` as the op reads
// and writes them on this rank (empty where it reads or writes nothing).
void rooted(RankProgram& prog, OpKind kind, int layer, int root, TensorList in, TensorList out) {
  Op& op = prog.ops().emplace_back();
  op.kind = kind;
  op.rank = prog.rank();
  op.layer = layer;
  op.peer = root;
  op.reads = std::move(in);
  op.writes = std::move(out);
}

}  // namespace

Schedule gen_zero3_owner(const GenOptions& o) {
  const std::string kind = "zero3-owner";
  require_at_least(kind, "dp", o.dp, 1);
  require_at_least(kind, "microbatches", o.microbatches, 1);
  require_at_least(kind, "layers", o.layers, 0);
  const int n = o.dp, m = o.microbatches, L = o.layers == 0 ? 4 : o.layers, M = n * m;
  auto owner = [n](int l) { return l % n; };

  Schedule sched;
  sched.header = make_header(n, L, M);
  sched.header.version = 2;
  const IdSet all = IdSet::range(0, M);
  for (int r = 0; r < n; ++r) {
    RankProgram prog(r, L, M);
    TensorList state;
    for (int l = 0; l < L; ++l)
      if (owner(l) == r) state.push_back(weight_tensor(l)), state.push_back(opt_state_tensor(l));
    if (!state.empty()) prog.load(std::move(state));

    // The owner's weight of layer l, on every rank, before a pass (the owner sends its own copy in place).
    auto fetch = [&](int l) {
      if (n == 1) return;
      if (owner(l) == r) rooted(prog, OpKind::Broadcast, l, r, {weight_tensor(l)}, {});
      else rooted(prog, OpKind::Broadcast, l, owner(l), {}, {weight_tensor(l)});
    };
    // After the pass: a copy that is not the owner's goes.
    auto release = [&](int l, TensorList& drop) {
      if (owner(l) != r) drop.push_back(weight_tensor(l));
    };

    for (int i = 0; i < m; ++i) {
      const IdSet b = one(r * m + i);
      prog.load({activation_tensor(0, b)});
      for (int l = 0; l < L; ++l) {
        fetch(l);
        prog.compute(OpKind::Forward, l, b);
        TensorList drop;
        release(l, drop);
        prog.free(std::move(drop));
      }
      prog.compute(OpKind::Loss, L, b);
      prog.free({activation_tensor(L, b)});
      for (int l = L - 1; l >= 0; --l) {
        fetch(l);
        Tensor a = activation_tensor(l, b), g_out = activation_grad_tensor(l + 1, b);
        Tensor g_in = activation_grad_tensor(l, b), dw = weight_grad_tensor(l, b);
        prog.compute(OpKind::Backward, l, b, {a, g_out, weight_tensor(l)}, {dw, g_in});
        TensorList drop = {a, g_out};
        if (l == 0) drop.push_back(g_in);
        release(l, drop);
        prog.free(std::move(drop));
        prog.add_grad(dw);
        if (i == m - 1 && n > 1) {  // this rank's sum of the layer's grads, to the owner
          Tensor local = prog.take_grad(l);
          TensorList out;
          if (owner(l) == r) out.push_back(weight_grad_tensor(l, all));
          rooted(prog, OpKind::Reduce, l, owner(l), {local}, std::move(out));
          prog.free({local});
        }
      }
    }

    for (int l = 0; l < L; ++l) {
      if (owner(l) != r) continue;
      const Tensor g = n > 1 ? weight_grad_tensor(l, all) : prog.take_grad(l);
      prog.compute(OpKind::Update, l, {}, {g, weight_tensor(l), opt_state_tensor(l)});
      prog.free({weight_tensor(l), opt_state_tensor(l), g});
    }
    sched.ranks.push_back(std::move(prog.ops()));
  }
  return sched;
}

}  // namespace trainsim::gen
