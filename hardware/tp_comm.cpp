#include "hardware/tp_comm.h"

#include <algorithm>

#include <fmt/format.h>

namespace trainsim::hw {

namespace {

// The GEMM a collective can run under: of which linears (a sublayer's input group or output linear, the head),
// in which pass.
enum class Gemm : std::uint8_t { None, InFwd, OutFwd, InDgrad, OutDgrad, InWgrad, HeadFwd, HeadDgrad, HeadWgrad };
// When the setting's overlap runs a collective under its GEMM.
enum class When : std::uint8_t {
  Never,
  Full,      // TpOverlap::Full with sequence parallelism
  Backward,  // TpOverlap::Backward or Full
};

struct Entry {
  Collective kind;
  TpRole role;
  Gemm gemm;
  When when;
  int sublayer;  // 0 attention, 1 MLP (for the partner's time)
};

// The pass's collectives (see the header comment), in the order it runs them, without times. The layer's last
// `moe` blocks are MoE blocks beside expert parallelism (expert TP 1): their routed experts take sequence shards
// through the all-to-alls, so their MLP sublayer has TP collectives only for a shared expert (`shared`, a TP-split
// dense MLP), and a layer ending in one has no output reduction (the combine gives each TP rank its shard).
std::vector<Entry> skeleton(const LayerContent& layer, OpKind kind, Recompute r, bool sp, int moe = 0,
                            bool shared = false) {
  std::vector<Entry> out;
  const int k = layer.num_blocks;
  auto has = [&](int b, int sub) { return sub == 0 || b < k - moe || shared; };
  auto forward = [&](bool recomputed) {
    if (layer.embedding) out.push_back({sp ? Collective::ReduceScatter : Collective::AllReduce, TpRole::Inner, Gemm::None, When::Never, 0});
    for (int b = 0; b < k; ++b)
      for (int sub = 0; sub < 2; ++sub) {
        if (!has(b, sub)) continue;
        if (sp) out.push_back({Collective::AllGather, TpRole::Inner, Gemm::InFwd, When::Full, sub});
        out.push_back({sp ? Collective::ReduceScatter : Collective::AllReduce, TpRole::Inner, Gemm::OutFwd,
                       sp ? When::Full : When::Never, sub});
      }
    if (layer.head && sp) out.push_back({Collective::AllGather, TpRole::Inner, Gemm::HeadFwd, When::Full, 0});
    if (recomputed) return;
    // The layer's ends: its input's gather (the first all-gather, unless the input is the token ids) and its
    // output's reduction (the last reduction, unless the output is the head's logits).
    if (!layer.embedding)
      for (Entry& e : out)
        if (e.kind == Collective::AllGather) {
          e.role = TpRole::InputGather;
          break;
        }
    if (!layer.head && moe == 0)
      for (auto it = out.rbegin(); it != out.rend(); ++it)
        if (it->kind != Collective::AllGather) {
          it->role = TpRole::OutputReduce;
          break;
        }
  };
  switch (kind) {
    case OpKind::Forward: forward(false); return out;
    case OpKind::Backward:
    case OpKind::BackwardInput: {
      const bool wgrad = kind == OpKind::Backward;
      const Collective reduce = sp ? Collective::ReduceScatter : Collective::AllReduce;
      if (r == Recompute::Full) forward(true);  // the blocks' forward again, with its communication
      const std::size_t first = out.size();
      // A column-parallel group's backward: (SP) its input gathered again under its input-grad GEMM, its input
      // grad reduced under its weight-grad GEMM (or, without the weight grad in the pass, under nothing).
      auto column = [&](Gemm dgrad, Gemm wgrad_gemm, int sub) {
        if (sp) out.push_back({Collective::AllGather, TpRole::Inner, dgrad, When::Backward, sub});
        out.push_back({reduce, TpRole::Inner, wgrad ? wgrad_gemm : Gemm::None, wgrad ? When::Backward : When::Never, sub});
      };
      if (layer.head) column(Gemm::HeadDgrad, Gemm::HeadWgrad, 0);
      for (int b = k - 1; b >= 0; --b)
        for (int sub = 1; sub >= 0; --sub) {
          if (!has(b, sub)) continue;
          // (SP) the grad of the output linear's output, gathered (the forward reduce-scatter's conjugate).
          if (sp) out.push_back({Collective::AllGather, TpRole::Inner, Gemm::OutDgrad, When::Full, sub});
          column(Gemm::InDgrad, Gemm::InWgrad, sub);
        }
      if (layer.embedding && sp) out.push_back({Collective::AllGather, TpRole::Inner, Gemm::None, When::Never, 0});
      // The layer's ends: the grad of its output gathered first (unless the head's logits), its input gathered
      // again and its input grad reduced last (unless the input is the token ids).
      if (sp && !layer.head && k > 0) out[first].role = TpRole::OutputGradGather;
      if (!layer.embedding) {
        for (auto it = out.rbegin(); it != out.rend() && it - out.rbegin() < static_cast<long>(out.size() - first); ++it)
          if (it->kind != Collective::AllGather) {
            it->role = TpRole::InputGradReduce;
            break;
          }
        if (sp)
          for (auto it = out.rbegin(); it != out.rend() && it - out.rbegin() < static_cast<long>(out.size() - first); ++it)
            if (it->kind == Collective::AllGather && it->gemm != Gemm::OutDgrad) {
              it->role = TpRole::InputGather;
              break;
            }
      }
      return out;
    }
    case OpKind::BackwardWeight:
      // The weight grads of a split backward use what the B pass kept and the schedule's gathers (the header
      // comment): the layer's input and its output's grad, gathered whole with SP.
      if (sp) {
        if (!layer.head) out.push_back({Collective::AllGather, TpRole::OutputGradGather, Gemm::None, When::Never, 0});
        if (!layer.embedding) out.push_back({Collective::AllGather, TpRole::InputGather, Gemm::None, When::Never, 0});
      }
      return out;
    default: return out;
  }
}

// The linears of one block's sublayer on one TP rank: its column-parallel input group and its row-parallel output.
struct Sublayer {
  std::vector<Linear> in;
  Linear out;
};
std::vector<Sublayer> sublayers(const ModelSpec& m, int tp) {
  std::vector<Sublayer> subs;
  Sublayer cur;
  for (const Linear& l : block_linears(m, tp)) {
    if (l.out == m.hidden && l.in != m.hidden) {  // row-parallel: ends the sublayer
      cur.out = l;
      subs.push_back(cur);
      cur = {};
    } else {
      cur.in.push_back(l);
    }
  }
  return subs;
}

}  // namespace

std::vector<TpCollectiveSpec> tp_pass_collectives(const HardwareSetting& s, const LayerContent& layer, OpKind kind,
                                                  double tokens, TpSplit tp, bool experts_inside) {
  const ModelSpec& m = s.model;
  const std::vector<Entry> entries =
      skeleton(layer, kind, s.recompute, tp.sequence_parallel,
               experts_inside ? 0 : m.moe_blocks(layer.first_block, layer.num_blocks), m.shared_experts > 0);
  std::vector<TpCollectiveSpec> out;
  if (entries.empty()) return out;
  const std::vector<Sublayer> subs = sublayers(s.model, tp.degree);
  const Linear head{static_cast<double>(s.model.hidden), static_cast<double>(s.model.vocab) / tp.degree, true};
  auto seconds = [&](const std::vector<Linear>& ls, OpKind pass, bool bf16) {
    double t = 0;
    for (const Linear& l : ls) t += linear_seconds(s, l, tokens, pass, bf16);
    return t;
  };
  auto partner = [&](const Entry& e) -> double {
    const Sublayer& sub = subs.at(std::min<std::size_t>(e.sublayer, subs.size() - 1));
    switch (e.gemm) {
      case Gemm::None: return 0;
      case Gemm::InFwd: return seconds(sub.in, OpKind::Forward, false);
      case Gemm::OutFwd: return seconds({sub.out}, OpKind::Forward, false);
      case Gemm::InDgrad: return seconds(sub.in, OpKind::BackwardInput, false);
      case Gemm::OutDgrad: return seconds({sub.out}, OpKind::BackwardInput, false);
      case Gemm::InWgrad: return seconds(sub.in, OpKind::BackwardWeight, false);
      case Gemm::HeadFwd: return seconds({head}, OpKind::Forward, true);
      case Gemm::HeadDgrad: return seconds({head}, OpKind::BackwardInput, true);
      case Gemm::HeadWgrad: return seconds({head}, OpKind::BackwardWeight, true);
    }
    return 0;
  };
  // Full overlap needs sequence parallelism (Megatron-LM's --tp-comm-overlap and torchtitan's async TP both do).
  const bool full = s.tp_overlap == TpOverlap::Full && tp.sequence_parallel;
  const bool backward = s.tp_overlap != TpOverlap::None;
  out.reserve(entries.size());
  for (const Entry& e : entries) {
    TpCollectiveSpec c;
    c.kind = e.kind, c.role = e.role;
    c.overlapped = e.gemm != Gemm::None && (e.when == When::Full ? full : e.when == When::Backward ? backward : false);
    if (c.overlapped) c.partner_s = partner(e);
    out.push_back(c);
  }
  return out;
}

double tp_exposed_seconds(const TpCollectiveSpec& c, double seconds) {
  return c.overlapped ? std::max(0.0, seconds - c.partner_s) : seconds;
}

bool tp_role_explicit(TpRole role, const LayerContent& layer, OpKind kind, TpExplicit e) {
  switch (role) {
    case TpRole::Inner: return false;
    case TpRole::OutputReduce: return !layer.head;
    case TpRole::InputGradReduce: return !layer.embedding && kind != OpKind::BackwardWeight;
    case TpRole::InputGather: return e.gathered_input;
    case TpRole::OutputGradGather: return e.gathered_grad;
  }
  return false;
}

TpCollectives tp_collectives_inside(const LayerContent& layer, OpKind kind, Recompute r, bool sequence_parallel,
                                    TpExplicit e) {
  TpCollectives c;
  for (const Entry& x : skeleton(layer, kind, r, sequence_parallel)) {
    if (tp_role_explicit(x.role, layer, kind, e)) continue;
    (x.kind == Collective::AllGather ? c.all_gathers : x.kind == Collective::ReduceScatter ? c.reduce_scatters
                                                                                          : c.all_reduces) += 1;
  }
  return c;
}

}  // namespace trainsim::hw
