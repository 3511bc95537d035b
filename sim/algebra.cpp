#include "sim/algebra.h"

#include <algorithm>
#include <array>
#include <span>
#include <fmt/format.h>

namespace trainsim {

namespace {

const Tensor* find_kind(std::span<const Tensor> ts, TensorKind k) {
  for (const auto& t : ts)
    if (t.kind == k) return &t;
  return nullptr;
}

std::string list(std::span<const Tensor> ts) {
  std::string s;
  for (const auto& t : ts) s += (s.empty() ? "" : " ") + t.str();
  return s.empty() ? "nothing" : s;
}

// Checks that `ts` holds exactly the kinds listed (one each): "" when it does, else what is wrong. The test
// comes first and the words are made only on failure (this runs for every compute op).
std::string expect_kinds(const char* what, std::span<const Tensor> ts, std::initializer_list<TensorKind> kinds) {
  bool ok = ts.size() == kinds.size();
  for (TensorKind k : kinds) ok = ok && find_kind(ts, k);
  if (ok) [[likely]] return {};
  std::string want;
  for (TensorKind k : kinds) want += (want.empty() ? "" : ", ") + std::string(long_name(k));
  return fmt::format("{} must be one each of: {} (got {})", what, want, list(ts));
}

// "" when `w` is the complete weight of `layer` (all shards of its TP slice), else what is wrong.
std::string check_weight(const Tensor& w, int layer) {
  if (w.layer == layer && w.complete()) [[likely]] return {};
  if (w.layer != layer) return fmt::format("the weight is {}, not layer {}'s", w.str(), layer);
  return fmt::format("the weight {} is not complete (holds shards {} of {}); all-gather it first", w.str(),
                     w.shards.str(), w.num_shards);
}

// "" when `t`, the activation or activation grad `what` of an op, may be read as complete: not a partial sum
// (Megatron's rule: a row-parallel output is all-reduced before anything reads it), not a TP slice unless
// `slice` allows that one, and every shard held (with sequence parallelism, all-gathered).
std::string check_complete_input(const char* what, const Tensor& t, const Tensor* slice = nullptr) {
  if (t.tp_size == 1 && t.complete() && t.route == Route::None && !t.expert()) [[likely]] return {};
  if (t.route == Route::Routed)
    return fmt::format("the {} {} holds tokens routed to experts that have not run: dispatch them with an all-to-all "
                       "over the EP group, run the experts, and combine them with a second all-to-all first",
                       what, t.str());
  if (t.expert())
    return fmt::format("the {} {}{} is one expert slice's tokens: combine them with an all-to-all over the EP group "
                       "first",
                       what, t.str(), route_words(t));
  if (t.partial)
    return fmt::format("the {} {} is a partial sum over TP slices; all-reduce it over the TP group first (or "
                       "reduce-scatter it, with sequence parallelism)",
                       what, t.str());
  if (t.tp_size != 1 && !(slice && slice->tp_size == t.tp_size && slice->tp_slices == t.tp_slices))
    return slice ? fmt::format("the {} {} is not the TP slice of the weight {}", what, t.str(), slice->str())
                 : fmt::format("the {} {} is one TP slice; this op needs the whole tensor", what, t.str());
  if (!t.complete())
    return fmt::format("the {} {} holds shards {} of {} only; all-gather it first", what, t.str(), t.shards.str(),
                       t.num_shards);
  return {};
}

// The TP slice an op computes with: its weight's, else (a weight-grad pass, which reads no weight) the
// slice of a sliced activation grad or of the weight grad it writes; nullptr without tensor parallelism.
const Tensor* tp_reference(const Op& op, const Tensor* w, const Tensor* g) {
  if (w) return w->tp_size > 1 ? w : nullptr;
  if (g && g->tp_sliced()) return g;
  for (const Tensor& t : op.writes)
    if (t.kind == TensorKind::WeightGrad && t.tp_sliced()) return &t;
  return nullptr;
}

// `t` as the TP slice of `ref` (unchanged when ref is null).
Tensor as_slice(Tensor t, const Tensor* ref) {
  if (ref) t.tp_size = ref->tp_size, t.tp_slices = ref->tp_slices;
  return t;
}

// `t` as the partial sum of `ref`'s TP slice (unchanged when ref is null).
Tensor as_partial(Tensor t, const Tensor* ref) {
  if (ref) t.tp_size = ref->tp_size, t.tp_slices = ref->tp_slices, t.partial = true;
  return t;
}

// True when `t` is the unsharded tensor of `kind`, `layer` and `batches` at step 0 (what activation_tensor,
// activation_grad_tensor and weight_grad_tensor make with their defaults), compared field by field without
// building it: this runs for every compute op.
bool is_plain(const Tensor& t, TensorKind kind, int layer, const IdSet& batches) {
  static const IdSet whole{0};
  return t.kind == kind && t.layer == layer && t.step == 0 && t.num_shards == 1 && t.tp_size == 1 &&
         t.route == Route::None && !t.expert() && t.shards == whole && t.batches == batches;
}

// The op writes exactly `want`, in order (compared in place: this runs for every compute op).
std::string check_writes(const Op& op, std::span<const Tensor> want) {
  if (std::equal(op.writes.begin(), op.writes.end(), want.begin(), want.end())) return "";
  return fmt::format("it writes {}, but {} gives {}", list(op.writes), op.describe(), list(want));
}

// Mixture of Experts (docs/design.md): the compute of expert slice j of layer l, on the tokens the dispatch gave
// it (A(l+1) in state ExpertIn, the router's output of the dense part): the forward writes the experts' output,
// the backward the weight grad of the slice and the grad of the experts' input, both for the dispatch's batches.
// `w` is the expert weight (null for a weight-grad pass), `a` and `g` the tokens and their grad (g null in a
// forward). With expert tensor parallelism (Megatron-Core's ETP) the weight is also TP slice k of t: the tokens are
// read whole (all-gathered over the expert-TP group), the output and the input grad are slice k's partial sums (the
// row-parallel second linear), reduce-scattered there before the combine; the weight grad is TP slice k's.
std::string check_expert_compute(const Op& op, const Tensor& a, const Tensor* g, const Tensor* w) {
  const int l = op.layer;
  const Tensor& ref = w ? *w : *g;
  if (w) {
    if (w->layer != l) return fmt::format("the expert weight is {}, not layer {}'s", w->str(), l);
    if (!w->complete())
      return fmt::format("the expert weight {} is not complete (holds shards {} of {}); all-gather it first",
                         w->str(), w->shards.str(), w->num_shards);
  }
  // The TP slice the experts compute with: the weight's, else (a weight-grad pass) the weight grad's it writes.
  const Tensor* tp = w ? (w->tp_sliced() ? w : nullptr) : tp_reference(op, nullptr, nullptr);
  auto tokens = [&](const char* what, const Tensor& t) -> std::string {
    if (t.layer != l + 1 || t.route != Route::ExpertIn)
      return fmt::format("the {} is {}, but the experts of layer {} read the tokens the dispatch gave them (A{}{{...}}"
                         "<e{}/{}> and its grad)",
                         what, t.str(), l, l + 1, ref.ep_index, ref.ep_size);
    if (t.ep_size != ref.ep_size || t.ep_index != ref.ep_index)
      return fmt::format("the {} {} holds the tokens of expert slice {} of {}, not those of {} (slice {} of {}): the "
                         "dispatch gives member j of the EP group the tokens of slice j",
                         what, t.str(), t.ep_index, t.ep_size, ref.str(), ref.ep_index, ref.ep_size);
    if (!t.complete())
      return fmt::format("the {} {} holds sequence shards {} of {} of the tokens only: with expert tensor parallelism "
                         "all-gather them over the expert-TP group first",
                         what, t.str(), t.shards.str(), t.num_shards);
    return {};
  };
  if (std::string e = tokens(g && op.kind != OpKind::Forward ? "activation" : "input", a); !e.empty()) return e;
  auto out = [&](Tensor t) {
    t = routed_as(std::move(t), Route::ExpertOut, ref.ep_index, ref.ep_size);
    return tp ? as_partial(std::move(t), tp) : t;
  };
  if (op.kind == OpKind::Forward) return check_writes(op, std::array{out(activation_tensor(l + 1, a.batches))});
  if (std::string e = tokens("activation grad", *g); !e.empty()) return e;
  if (a.batches != g->batches)
    return fmt::format("batch mismatch: activation {} has batches {{{}}}, activation grad {} has {{{}}}", a.str(),
                       a.batches.str(), g->str(), g->batches.str());
  Tensor want[2];
  std::size_t n = 0;
  if (op.kind != OpKind::BackwardInput)
    want[n++] = as_slice(expert_slice(weight_grad_tensor(l, a.batches), ref.ep_index, ref.ep_size), tp);
  if (op.kind != OpKind::BackwardWeight) want[n++] = out(activation_grad_tensor(l + 1, a.batches));
  return check_writes(op, std::span<const Tensor>(want, n));
}

}  // namespace

bool is_loadable(const Tensor& t) {
  return ((t.kind == TensorKind::Weight || t.kind == TensorKind::OptState) && t.step == 0) ||
         (t.kind == TensorKind::Activation && t.layer == 0 && t.tp_size == 1 && t.route == Route::None && !t.expert()) ||
         (t.kind == TensorKind::WeightGrad && t.batches.empty());
}

Tensor updated_weight(const Tensor& w, const Tensor& o) {
  if (w.tp_size != o.tp_size || w.tp_slices != o.tp_slices)
    throw TensorError(fmt::format("the weight {} and its optimizer state {} are different TP slices", w.str(), o.str()));
  if (w.ep_size != o.ep_size || w.ep_index != o.ep_index)
    throw TensorError(fmt::format("the weight {} and its optimizer state {} are different expert slices", w.str(), o.str()));
  Tensor out = w;
  out.step = w.step + 1;
  if (o.num_shards == w.num_shards) {
    if (!w.shards.contains(o.shards))
      throw TensorError(fmt::format("the weight {} does not hold the shards its optimizer state {} updates", w.str(), o.str()));
  } else if (!w.complete()) {
    throw TensorError(fmt::format("the weight {} and its optimizer state {} are sharded differently", w.str(), o.str()));
  }
  out.shards = o.shards;
  out.num_shards = o.num_shards;
  return out;
}

namespace {

std::string check_compute(const Op& op, int layers, int microbatches) {
  const int l = op.layer;
  if (op.kind != OpKind::Loss && (l < 0 || l >= layers))
    return fmt::format("no such layer (layers 0..{})", layers - 1);
  const Tensor* a = find_kind(op.reads, TensorKind::Activation);
  const Tensor* g = find_kind(op.reads, TensorKind::ActivationGrad);
  const Tensor* w = find_kind(op.reads, TensorKind::Weight);
  std::string e;
  switch (op.kind) {
    case OpKind::Forward:
      if (!(e = expect_kinds("the inputs", op.reads, {TensorKind::Activation, TensorKind::Weight})).empty()) return e;
      if (w->expert()) return check_expert_compute(op, *a, nullptr, w);
      if (!(e = check_weight(*w, l)).empty()) return e;
      if (a->layer != l) return fmt::format("the input is {}, the activation of layer {}, not {}", a->str(), a->layer, l);
      if (!(e = check_complete_input("input", *a)).empty()) return e;
      if (w->tp_size == 1) {
        if (op.writes.size() == 1 && is_plain(op.writes[0], TensorKind::Activation, l + 1, a->batches)) return "";
        // An MoE layer's dense part (attention, router) leaves its tokens routed to the experts (docs/design.md).
        if (op.writes.size() == 1 && op.writes[0].route == Route::Routed &&
            op.writes[0] == routed_as(activation_tensor(l + 1, a->batches), Route::Routed))
          return "";
        return check_writes(op, std::array{activation_tensor(l + 1, a->batches)});
      }
      // Tensor parallelism: the row-parallel output is this slice's partial sum; the last layer's LM head is
      // column-parallel and gives this slice of the vocabulary's logits (Shoeybi et al. 2019, §3). An MoE layer's
      // dense part under TP with sequence parallelism (expert TP 1, Megatron-Core's folded layout) leaves this TP
      // rank's sequence shard of its tokens routed: its reduce-scatter runs inside, and the experts take it.
      if (op.writes.size() == 1 && op.writes[0].route == Route::Routed &&
          op.writes[0] == shard(routed_as(activation_tensor(l + 1, a->batches), Route::Routed), w->tp_index(), w->tp_size))
        return "";
      return check_writes(op, std::array{l + 1 == layers ? as_slice(activation_tensor(l + 1, a->batches), w)
                                                          : as_partial(activation_tensor(l + 1, a->batches), w)});
    case OpKind::Backward:
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight: {
      bool needs_weight = op.kind != OpKind::BackwardWeight;
      e = needs_weight ? expect_kinds("the inputs", op.reads, {TensorKind::Activation, TensorKind::ActivationGrad, TensorKind::Weight})
                       : expect_kinds("the inputs", op.reads, {TensorKind::Activation, TensorKind::ActivationGrad});
      if (!e.empty()) return e;
      if ((w && w->expert()) || (!needs_weight && g->expert())) return check_expert_compute(op, *a, g, needs_weight ? w : nullptr);
      if (needs_weight && !(e = check_weight(*w, l)).empty()) return e;
      if (a->layer != l) return fmt::format("the activation is {}, not layer {}'s input", a->str(), l);
      if (g->layer != l + 1)
        return fmt::format("the activation grad is {}, not the grad of layer {}'s output (dA{})", g->str(), l, l + 1);
      if (a->batches != g->batches)
        return fmt::format("batch mismatch: activation {} has batches {{{}}}, activation grad {} has {{{}}}", a->str(),
                           a->batches.str(), g->str(), g->batches.str());
      if (!(e = check_complete_input("activation", *a)).empty()) return e;
      const Tensor* tp = tp_reference(op, needs_weight ? w : nullptr, g);
      // The last layer's grad comes in by vocabulary slice (its LM head is column-parallel); any other is whole.
      // An MoE layer's dense backward reads the combined grad of its routed tokens (docs/design.md).
      // Under TP (expert TP 1) that grad is this TP rank's sequence shard of it, as the dispatch sent it.
      const bool routed_grad =
          g->route == Route::Routed && !g->expert() &&
          (tp ? g->num_shards == tp->tp_size && g->shards == IdSet{tp->tp_index()} : g->complete());
      if (!routed_grad &&
          !(e = check_complete_input("activation grad", *g, tp && l + 1 == layers ? tp : nullptr)).empty())
        return e;
      if (tp) {
        // Tensor parallelism: the weight grad of this slice, and the input grad as this slice's partial sum
        // (the conjugate of the forward's all-reduce, Shoeybi et al. 2019, fig. 3).
        Tensor want[2];
        std::size_t n = 0;
        if (op.kind != OpKind::BackwardInput) want[n++] = as_slice(weight_grad_tensor(l, a->batches), tp);
        if (op.kind != OpKind::BackwardWeight) want[n++] = as_partial(activation_grad_tensor(l, a->batches), tp);
        return check_writes(op, std::span<const Tensor>(want, n));
      }
      if (op.writes.size() == (op.kind == OpKind::Backward ? 2u : 1u) &&
          (op.kind == OpKind::BackwardInput || is_plain(op.writes[0], TensorKind::WeightGrad, l, a->batches)) &&
          (op.kind == OpKind::BackwardWeight || is_plain(op.writes.back(), TensorKind::ActivationGrad, l, a->batches)))
        return "";
      Tensor want[2];
      std::size_t n = 0;
      if (op.kind != OpKind::BackwardInput) want[n++] = weight_grad_tensor(l, a->batches);
      if (op.kind != OpKind::BackwardWeight) want[n++] = activation_grad_tensor(l, a->batches);
      return check_writes(op, std::span<const Tensor>(want, n));
    }
    case OpKind::Loss:
      if (!(e = expect_kinds("the inputs", op.reads, {TensorKind::Activation})).empty()) return e;
      if (a->layer != layers)
        return fmt::format("the input is {}, but the loss needs the final activation (layer {})", a->str(), layers);
      // A vocabulary slice of the logits is read as such: the vocabulary-parallel cross-entropy (Megatron-LM)
      // all-reduces the max and the sum of exponentials inside the loss and gives the grad of this slice.
      // A sequence shard of the final activation (an MoE last layer under TP and sequence parallelism: the combine
      // gives each TP rank its shard) gives that shard's grad: the loss is a sum over tokens.
      if (!a->tp_sliced() && !a->partial && a->route == Route::None && !a->expert() && !a->complete() &&
          a->shards.size() == 1) {
        Tensor want = shard(activation_grad_tensor(layers, a->batches), a->shards.runs().front().first, a->num_shards);
        return check_writes(op, std::array{want});
      }
      if (!(e = check_complete_input("input", *a, a->tp_sliced() ? a : nullptr)).empty()) return e;
      if (op.writes.size() == 1 && is_plain(op.writes[0], TensorKind::ActivationGrad, layers, a->batches)) return "";
      return check_writes(op, std::array{as_slice(activation_grad_tensor(layers, a->batches), a->tp_sliced() ? a : nullptr)});
    case OpKind::Update: {
      if (!(e = expect_kinds("the inputs", op.reads, {TensorKind::WeightGrad, TensorKind::Weight, TensorKind::OptState})).empty())
        return e;
      const Tensor& dw = *find_kind(op.reads, TensorKind::WeightGrad);
      const Tensor& o = *find_kind(op.reads, TensorKind::OptState);
      if (w->layer != l) return fmt::format("the weight is {}, not layer {}'s", w->str(), l);
      if (dw.layer != l) return fmt::format("the weight grad is {}, not layer {}'s", dw.str(), l);
      if (o.layer != l) return fmt::format("the optimizer state is {}, not layer {}'s", o.str(), l);
      if (w->tp_size != dw.tp_size || w->tp_slices != dw.tp_slices || w->tp_size != o.tp_size ||
          w->tp_slices != o.tp_slices)
        return fmt::format("the weight {}, its grad {} and its optimizer state {} are not one TP slice", w->str(),
                           dw.str(), o.str());
      if (w->ep_size != dw.ep_size || w->ep_index != dw.ep_index || w->ep_size != o.ep_size ||
          w->ep_index != o.ep_index)
        return fmt::format("the weight {}, its grad {} and its optimizer state {} are not one expert slice", w->str(),
                           dw.str(), o.str());
      const auto& runs = dw.batches.runs();
      const bool every_batch = microbatches > 0 ? runs.size() == 1 && runs.front() == IdSet::Run{0, microbatches}
                                                : dw.batches.empty();
      if (!every_batch) {
        IdSet missing = IdSet::range(0, microbatches) - dw.batches;
        return fmt::format("the weight grad {} is missing batches {{{}}}; an update needs the grad of every batch",
                           dw.str(), missing.str());
      }
      if (dw.num_shards > 1 && (o.num_shards != dw.num_shards || !dw.shards.contains(o.shards)))
        return fmt::format("the weight grad {} does not cover the shards being updated ({})", dw.str(), o.str());
      if (w->step != o.step)
        return fmt::format("weight {} is at step {} but its optimizer state {} is at step {}", w->str(), w->step,
                           o.str(), o.step);
      // The writes compared in place first (this runs for every update): the weight and the optimizer state
      // one step on, the weight holding the state's shards (updated_weight, when it does not throw).
      if (op.writes.size() == 2 && (o.num_shards == w->num_shards ? w->shards.contains(o.shards) : w->complete())) {
        const Tensor &nw = op.writes[0], &no = op.writes[1];
        if (nw.kind == TensorKind::Weight && nw.layer == w->layer && nw.step == w->step + 1 &&
            nw.batches == w->batches && nw.shards == o.shards && nw.num_shards == o.num_shards &&
            nw.tp_size == w->tp_size && nw.tp_slices == w->tp_slices && !nw.partial && nw.ep_size == w->ep_size &&
            nw.ep_index == w->ep_index && no.ep_size == o.ep_size && no.ep_index == o.ep_index &&
            nw.route == Route::None && no.route == Route::None &&
            no.kind == o.kind && no.layer == o.layer && no.step == o.step + 1 && no.num_shards == o.num_shards &&
            no.batches == o.batches && no.shards == o.shards && no.tp_size == o.tp_size &&
            no.tp_slices == o.tp_slices && !no.partial)
          return "";
      }
      Tensor nw;
      try {
        nw = updated_weight(*w, o);
      } catch (const TensorError& e) {
        return e.what();
      }
      Tensor no = o;
      ++no.step;
      const Tensor want[] = {nw, no};
      return check_writes(op, want);
    }
    default: return "";
  }
}

// Broadcast and reduce (NCCL's semantics, docs/schedule-format.md): a root is named; a broadcast's root reads
// the tensor and writes nothing (its copy is the output, in place) and every other member reads nothing and
// writes the root's tensor; a reduce's members each read their part and only the root writes the sum.
std::string rooted_problem(const Op& op) {
  const char* name = op_name(op.kind);
  if (op.peer < 0) return fmt::format("{} needs a root ('root RANK')", name);
  const bool root = op.rank == op.peer;
  if (op.kind == OpKind::Broadcast) {
    if (root) {
      if (op.reads.size() != 1)
        return fmt::format("the root of a broadcast reads the one tensor it sends (got {})", list(op.reads));
      if (!op.writes.empty())
        return fmt::format("the root's {} is the broadcast's output in place: it writes nothing (write 'broadcast "
                           "root {} : {}', without '->')",
                           op.reads.front().str(), op.peer, op.reads.front().str());
      return "";
    }
    if (!op.reads.empty())
      return fmt::format("only the root (rank {}) sends in a broadcast; rank {} reads nothing (got {})", op.peer,
                         op.rank, list(op.reads));
    if (op.writes.size() != 1)
      return fmt::format("a broadcast gives each member one tensor, the root's (got {})", list(op.writes));
    return "";
  }
  if (op.reads.size() != 1) return fmt::format("reduce takes one tensor (got {})", list(op.reads));
  if (root && op.writes.size() != 1)
    return fmt::format("the root of a reduce gets one tensor, the sum (got {})", list(op.writes));
  if (!root && !op.writes.empty())
    return fmt::format("only the root (rank {}) gets the reduce's result; rank {} writes nothing (got {})", op.peer,
                       op.rank, list(op.writes));
  return "";
}

}  // namespace

std::string algebra_problem(const Op& op, int layers, int microbatches) {
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward:
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight:
    case OpKind::Loss:
    case OpKind::Update: return check_compute(op, layers, microbatches);
    case OpKind::Load:
      if (op.writes.empty()) return "load brings nothing (write the tensors after ->)";
      for (const Tensor& t : op.writes) {
        if (!is_loadable(t))
          return fmt::format("cannot load {}: only fresh weights and optimizer state (step 0), model inputs (A0) and "
                             "empty weight grads come from outside; the rest must be computed",
                             t.str());
        if (t.layer < 0 || t.layer >= layers) return fmt::format("cannot load {}: no such layer", t.str());
        if (t.batches.runs().size() && t.batches.runs().back().second > microbatches)
          return fmt::format("cannot load {}: batches go up to {}", t.str(), microbatches - 1);
      }
      return "";
    case OpKind::Free:
      if (op.reads.empty()) return "free drops nothing (list the tensors after :)";
      return "";
    case OpKind::Accumulate: {
      if (op.reads.empty() || op.writes.size() != 1) return "accumulate sums one or more weight grads into one";
      try {
        Tensor acc = op.reads.front();
        if (acc.kind != TensorKind::WeightGrad) return fmt::format("only weight grads accumulate, not {}", acc.str());
        for (std::size_t i = 1; i < op.reads.size(); ++i) acc = sum(acc, op.reads[i]);
        if (acc != op.writes.front())
          return fmt::format("the sum of {} is {}, not {}", list(op.reads), acc.str(), op.writes.front().str());
      } catch (const TensorError& e) {
        return e.what();
      }
      return "";
    }
    case OpKind::Send:
      if (op.reads.size() != 1) return fmt::format("send carries one tensor (got {})", list(op.reads));
      return "";
    case OpKind::Recv:
      if (op.writes.size() != 1) return fmt::format("recv brings one tensor (got {})", list(op.writes));
      return "";
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllReduce:
      if (op.reads.size() != 1) return fmt::format("{} takes one tensor (got {})", op_name(op.kind), list(op.reads));
      if (op.writes.size() > 1) return fmt::format("{} gives one tensor (got {})", op_name(op.kind), list(op.writes));
      return "";
    case OpKind::AllToAll:
      if (op.reads.size() != 1 || op.writes.size() != 1)
        return fmt::format("an all-to-all sends one tensor and gets one (got {} -> {})", list(op.reads), list(op.writes));
      return "";
    case OpKind::Barrier: return "";
    case OpKind::Broadcast:
    case OpKind::Reduce: return rooted_problem(op);
  }
  return "";
}

}  // namespace trainsim
