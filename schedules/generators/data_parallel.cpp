// Data-parallel schedules over dp ranks, each running all `layers` layers on its own m microbatches (rank r:
// batches r*m .. r*m+m-1; the header's microbatches are dp*m):
//   ddp    full weight and optimizer state everywhere; grads summed locally, all-reduced per layer during
//          the last microbatch's backward; every rank updates the full layer.
//   zero1  optimizer state sharded (O[r/dp]): all-reduced full grads, the update writes the rank's weight
//          shard W[r/dp]@1, then an all-gather makes the full updated weight again.
//   zero2  as zero1, but each microbatch's grad is reduce-scattered right after its backward and only the
//          rank's grad shard is summed and kept.
//   fsdp   (ZeRO-3) weights sharded too: each layer's weight is all-gathered before its forward, `prefetch`
//          layers ahead; with reshard_after_forward it is freed after the forward and gathered again
//          (prefetched the same way) for the backward, otherwise kept until the layer's backward; grads
//          are reduce-scattered as in zero2; each rank updates its shards.
// With dp = 1 the collectives would be copies and are left out.
#include <fmt/format.h>

#include <stdexcept>

#include "schedules/generators/builder.h"

namespace trainsim::gen {

namespace {
enum class Mode { Ddp, Zero1, Zero2, Fsdp };
}

Schedule gen_data_parallel(const std::string& kind, const GenOptions& o) {
  Mode mode = kind == "ddp" ? Mode::Ddp : kind == "zero1" ? Mode::Zero1 : kind == "zero2" ? Mode::Zero2 : Mode::Fsdp;
  require_at_least(kind, "dp", o.dp, 1);
  require_at_least(kind, "microbatches", o.microbatches, 1);
  require_at_least(kind, "layers", o.layers, 0);
  if (mode == Mode::Fsdp) require_at_least(kind, "prefetch", o.prefetch, 0);
  const int n = o.dp, m = o.microbatches, L = o.layers == 0 ? 4 : o.layers, M = n * m;
  const bool shard_opt = mode != Mode::Ddp, shard_grads = mode == Mode::Zero2 || mode == Mode::Fsdp;
  const bool shard_weights = mode == Mode::Fsdp;
  const int prefetch = mode == Mode::Fsdp ? o.prefetch : 0;

  Schedule sched;
  sched.header = make_header(n, L, M);
  const IdSet all = IdSet::range(0, M);
  for (int r = 0; r < n; ++r) {
    RankProgram prog(r, L, M);
    TensorList state;
    for (int l = 0; l < L; ++l) {
      state.push_back(shard_weights ? weight_shard(l, r, n) : weight_tensor(l));
      state.push_back(shard_opt ? opt_shard(l, r, n) : opt_state_tensor(l));
    }
    prog.load(std::move(state));

    // fsdp: which layers hold their gathered weight now.
    std::vector<bool> gathered(L, false);
    auto gather = [&](int l) {
      if (!shard_weights || l < 0 || l >= L || gathered[l]) return;
      gathered[l] = true;
      if (n > 1) prog.collective(OpKind::AllGather, l, 0, weight_shard(l, r, n), weight_full(l, n));
    };
    auto release = [&](int l, TensorList& drop) {
      if (!shard_weights || !gathered[l]) return;
      gathered[l] = false;
      if (n > 1) drop.push_back(weight_full(l, n));
    };
    auto weight = [&](int l) { return shard_weights ? weight_full(l, n) : weight_tensor(l); };

    std::vector<Tensor> reduced(L);  // ddp, zero1: the all-reduced grad of each layer
    for (int i = 0; i < m; ++i) {
      const IdSet b = one(r * m + i);
      IdSet cohort;  // the microbatches the ranks run at the same time, summed by a reduce-scatter
      for (int q = 0; q < n; ++q) cohort.insert(q * m + i);
      prog.load({activation_tensor(0, b)});
      for (int l = 0; l < L; ++l) {
        for (int k = l; k <= l + prefetch; ++k) gather(k);
        prog.compute(OpKind::Forward, l, b, {activation_tensor(l, b), weight(l)}, {activation_tensor(l + 1, b)});
        if (o.reshard_after_forward) {
          TensorList drop;
          release(l, drop);
          prog.free(std::move(drop));
        }
      }
      prog.compute(OpKind::Loss, L, b);
      prog.free({activation_tensor(L, b)});
      for (int l = L - 1; l >= 0; --l) {
        for (int k = l; k >= l - prefetch; --k) gather(k);
        Tensor a = activation_tensor(l, b), g_out = activation_grad_tensor(l + 1, b);
        Tensor g_in = activation_grad_tensor(l, b), dw = weight_grad_tensor(l, b);
        prog.compute(OpKind::Backward, l, b, {a, g_out, weight(l)}, {dw, g_in});
        TensorList drop = {a, g_out};
        if (l == 0) drop.push_back(g_in);
        release(l, drop);
        prog.free(std::move(drop));
        if (shard_grads) {
          if (n > 1) {
            Tensor part = weight_grad_tensor(l, cohort, one(r), n);
            prog.collective(OpKind::ReduceScatter, l, 0, dw, part);
            prog.free({dw});
            prog.add_grad(part);
          } else {
            prog.add_grad(dw);
          }
        } else {
          prog.add_grad(dw);
          if (i == m - 1) {
            Tensor local = prog.take_grad(l);
            reduced[l] = weight_grad_tensor(l, all);
            if (n > 1) {
              prog.collective(OpKind::AllReduce, l, 0, local, reduced[l]);
              prog.free({local});
            }
          }
        }
      }
    }

    for (int l = 0; l < L; ++l) {
      Tensor g = shard_grads ? prog.take_grad(l) : reduced[l];
      if (mode == Mode::Ddp) {
        prog.compute(OpKind::Update, l, {});
        prog.free({weight_tensor(l), opt_state_tensor(l), g});
        continue;
      }
      Tensor w = shard_weights ? weight_shard(l, r, n) : weight_tensor(l), opt = opt_shard(l, r, n);
      Tensor w1 = weight_shard(l, r, n, 1);
      prog.compute(OpKind::Update, l, {}, {g, w, opt}, {w1, opt_shard(l, r, n, 1)});
      prog.free({w, opt, g});
      if (!shard_weights && n > 1) {  // zero1, zero2: everyone needs the whole updated weight
        prog.collective(OpKind::AllGather, l, 0, w1, weight_full(l, n, 1));
        prog.free({w1});
      }
    }
    sched.ranks.push_back(std::move(prog.ops()));
  }
  return sched;
}

}  // namespace trainsim::gen
