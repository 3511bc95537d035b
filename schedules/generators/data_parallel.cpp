// Data-parallel schedules over dp ranks, each running all `layers` layers on its own m microbatches (rank r's
// i-th: batch i*dp + r, so that the microbatches the ranks run at the same time, which a reduce-scatter sums, are
// one run of ids, i*dp .. i*dp+dp-1, and an op's batch set stays a few runs however many ranks there are; the
// header's microbatches are dp*m):
//   ddp    full weight and optimizer state everywhere; grads summed locally, all-reduced during the last
//          microbatch's backward in buckets of `bucket_layers` consecutive layers; every rank updates the full
//          layer.
//   zero1  optimizer state sharded (O[r/dp]): all-reduced full grads (per layer), the update writes the rank's
//          weight shard W[r/dp]@1, then an all-gather makes the full updated weight again.
//   zero2  as zero1, but each microbatch's grad is reduce-scattered right after its backward and only the
//          rank's grad shard is summed and kept.
//   fsdp   (ZeRO-3) weights sharded too: each layer's weight is all-gathered before its forward, prefetched
//          `prefetch` layers ahead; with reshard_after_forward it is freed after the forward (but the last
//          layer's) and gathered again (prefetched the same way) for the backward, otherwise kept until the
//          layer's backward; grads are reduce-scattered as in zero2; each rank updates its shards.
// With dp = 1 the collectives would be copies and are left out.
//
// Overlap (docs/design.md, "Overlap as the frameworks do it"): the collectives run on communication streams, as
// FSDP2 runs them: all-gathers on its all-gather stream (kGatherStream), reduce-scatters on its reduce-scatter
// stream (kReduceStream; ZeRO's grad all-reduces too, DDP's on kGatherStream, its only one). Both streams go to the
// data-parallel process group's one NCCL communicator, which runs its operations one at a time in launch order
// (NVIDIA/nccl#574): the stream engine makes a collective wait for the rank's previous one over the same group.
// It also starts a collective on a communication stream no earlier than the compute issued before it
// (ProcessGroupNCCL's syncStream; schedules/stream_sim.h), so where an all-gather is issued is what bounds how many
// run ahead of the compute, and so the gathered weights they hold:
//   - forward: FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, wait_for_unshard) makes its
//     all-gather streams wait for the copy-out of the layer before the current one (it keeps the previous
//     all-gather's output one layer longer so that the next copy-in and all-gather overlap the copy-out), so the
//     all-gather of layer l prefetched by layer l - k starts once the copy-out of layer l - k - 1, which follows
//     the forward of layer l - k - 2, has run: with `prefetch` k it is issued after the forward of l - k - 2.
//   - backward: its all-gather streams wait for the current layer's copy-out, and _backward_prefetch issues the
//     next layer's all-gather then: the all-gather of layer l is issued after the backward of layer l + k + 1.
//   - prefetch 0: after the pass just before, so no all-gather overlaps compute (the reference point).
// Grads are reduce-scattered (FSDP, ZeRO-2) or all-reduced (DDP, ZeRO-1) once the backward has written them, and a
// reduce-scattered shard is added to the sharded grad on the reduce-scatter stream too (FSDP2's foreach_reduce
// accumulates there), so the backward goes on meanwhile; the optimizer steps after the backward, each waiting for
// its layer's reduced grad, and ZeRO-1/2 all-gather the updated weights behind the steps.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "schedules/generators/builder.h"

namespace trainsim::gen {

namespace {

enum class Mode { Ddp, Zero1, Zero2, Fsdp };

// The data-parallel collectives' streams (0 is the compute stream): FSDP2's all-gather and reduce-scatter streams.
constexpr int kGatherStream = 1, kReduceStream = 2;

}  // namespace

Schedule gen_data_parallel(const std::string& kind, const GenOptions& o) {
  Mode mode = kind == "ddp" ? Mode::Ddp : kind == "zero1" ? Mode::Zero1 : kind == "zero2" ? Mode::Zero2 : Mode::Fsdp;
  require_at_least(kind, "dp", o.dp, 1);
  require_at_least(kind, "microbatches", o.microbatches, 1);
  require_at_least(kind, "layers", o.layers, 0);
  if (mode == Mode::Fsdp) require_at_least(kind, "prefetch", o.prefetch, 0);
  if (mode == Mode::Ddp) require_at_least(kind, "bucket-layers", o.bucket_layers, 1);
  const int n = o.dp, m = o.microbatches, L = o.layers == 0 ? 4 : o.layers, M = n * m;
  const bool shard_opt = mode != Mode::Ddp, shard_grads = mode == Mode::Zero2 || mode == Mode::Fsdp;
  const bool shard_weights = mode == Mode::Fsdp;
  const int prefetch = mode == Mode::Fsdp ? o.prefetch : 0;
  // How many passes ahead of its own an all-gather is issued in each direction (see the top of the file).
  const int ahead_forward = prefetch == 0 ? 0 : prefetch + 1, ahead_backward = prefetch;
  // Layers per all-reduce bucket: DDP's buckets, ZeRO-1 one layer at a time.
  const int bucket = mode == Mode::Ddp ? std::min(o.bucket_layers, L) : 1;
  const int reduce_stream = mode == Mode::Ddp ? kGatherStream : kReduceStream;

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
      if (!shard_weights || gathered[l]) return;
      gathered[l] = true;
      if (n > 1) prog.collective(OpKind::AllGather, l, 0, weight_shard(l, r, n), weight_full(l, n), kGatherStream);
    };
    auto release = [&](int l, TensorList& drop) {
      if (!shard_weights || !gathered[l]) return;
      gathered[l] = false;
      if (n > 1) drop.push_back(weight_full(l, n));
    };
    auto weight = [&](int l) { return shard_weights ? weight_full(l, n) : weight_tensor(l); };
    // The layer at position p of a pass sequence (forward: 0 .. L-1, backward: L-1 .. 0).
    auto forward_layer = [](int p) { return p; };
    auto backward_layer = [L](int p) { return L - 1 - p; };

    std::vector<Tensor> reduced(L);  // ddp, zero1: the all-reduced grad of each layer
    for (int i = 0; i < m; ++i) {
      const IdSet b = one(i * n + r);
      const IdSet cohort = IdSet::range(i * n, (i + 1) * n);  // the microbatches the ranks run at the same time
      prog.load({activation_tensor(0, b)});
      for (int p = 0; p <= std::min(ahead_forward, L - 1); ++p) gather(forward_layer(p));
      for (int p = 0; p < L; ++p) {
        const int l = forward_layer(p);
        prog.compute(OpKind::Forward, l, b, {activation_tensor(l, b), weight(l)}, {activation_tensor(l + 1, b)});
        if (o.reshard_after_forward && l < L - 1) {
          TensorList drop;
          release(l, drop);
          prog.free(std::move(drop));
        }
        if (p + ahead_forward + 1 < L) gather(forward_layer(p + ahead_forward + 1));
      }
      prog.compute(OpKind::Loss, L, b);
      prog.free({activation_tensor(L, b)});
      for (int p = 0; p <= std::min(ahead_backward, L - 1); ++p) gather(backward_layer(p));
      for (int p = 0; p < L; ++p) {
        const int l = backward_layer(p);
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
            prog.collective(OpKind::ReduceScatter, l, 0, dw, part, reduce_stream);
            prog.free({dw});
            prog.add_grad(part, reduce_stream);
          } else {
            prog.add_grad(dw);
          }
        } else {
          prog.add_grad(dw);
          // The last microbatch's backward: a bucket is all-reduced once its lowest layer's grad is ready.
          const int top = L - 1 - ((L - 1 - l) / bucket) * bucket, low = std::max(0, top - bucket + 1);
          if (i == m - 1 && l == low)
            for (int k = top; k >= low; --k) {
              Tensor local = prog.take_grad(k);
              reduced[k] = weight_grad_tensor(k, all);
              if (n > 1) {
                prog.collective(OpKind::AllReduce, k, 0, local, reduced[k], reduce_stream);
                prog.free({local});
              }
            }
        }
        if (p + ahead_backward + 1 < L) gather(backward_layer(p + ahead_backward + 1));
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
        prog.collective(OpKind::AllGather, l, 0, w1, weight_full(l, n, 1), kGatherStream);
        prog.free({w1});
      }
    }
    sched.ranks.push_back(std::move(prog.ops()));
  }
  return sched;
}

}  // namespace trainsim::gen
