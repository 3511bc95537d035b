// The model's analytic gradients against central finite differences, in fp64, for every element of every
// parameter of a small model, with the layers cut one way and another (embedding and head in one layer, or
// in different layers with a middle layer between).
//
// Tolerance: the CPU kernels run in double here. With step h = 1e-5 the central difference has truncation
// error about h²·|f'''| (≈1e-10) and rounding error about 1e-16·|L|/h (≈1e-10), far below the 1e-6
// relative (or 1e-8 absolute) accepted below; a wrong backward formula gives errors of order 1.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "exec/cpu/cpu_kernels.h"
#include "exec/layout.h"
#include "exec/model.h"

using namespace trainsim::exec;

namespace {

struct Net {
  ModelConfig m;
  std::vector<LayerLayout> layouts;
  std::vector<std::vector<double>> weights;
  std::vector<int> tokens, targets;
  HostAllocator alloc;
  CpuKernels<double> k;
  std::vector<double> cos, sin;
  ModelContext<double> c;
  double extra = 0;  // added to the loss: what c.on_route adds up in a forward (the load-balancing loss's test)

  Net(ModelConfig cfg, int layers) : m(cfg) {
    for (const LayerSpec& s : partition(m, layers)) layouts.emplace_back(m, s);
    for (const LayerLayout& l : layouts) {
      std::vector<float> w(l.size());
      init_parameters(l, 7, 0, l.size(), w.data());
      weights.emplace_back(w.begin(), w.end());
      // Norm gains at exactly 1 hide errors that a gain would scale: perturb every parameter a little.
      for (std::size_t i = 0; i < weights.back().size(); ++i) weights.back()[i] += 0.05 * std::sin(1.0 + 3.7 * i);
    }
    long n = m.tokens_per_microbatch();
    for (long i = 0; i < n; ++i) tokens.push_back(static_cast<int>((i * 7 + 3) % m.vocab));
    for (long i = 0; i < n; ++i) targets.push_back(static_cast<int>((i * 5 + 1) % m.vocab));
    rope_tables(m, cos, sin);
    c.k = &k, c.alloc = &alloc, c.rope_cos = cos.data(), c.rope_sin = sin.data();
  }

  // Mean loss over the microbatch; with `grads`, also the analytic gradient of every layer.
  double loss(std::vector<std::vector<double>>* grads) {
    const int L = static_cast<int>(layouts.size()), B = m.microbatch_size;
    std::vector<std::vector<double>> acts(L + 1);
    std::vector<LayerStash> stash(L);
    extra = 0;
    for (int l = 0; l < L; ++l) {
      acts[l + 1].resize(activation_elements(m, l + 1, L, B));
      const void* in = l == 0 ? static_cast<const void*>(tokens.data()) : acts[l].data();
      layer_forward(c, layouts[l], weights[l].data(), in, B, acts[l + 1].data(), &stash[l]);
    }
    std::vector<double> dlogits(acts[L].size());
    double sum = 0;
    const double scale = 1.0 / static_cast<double>(m.tokens_per_microbatch());
    loss_forward_backward(c, m, acts[L].data(), targets.data(), B, scale, dlogits.data(), &sum);
    if (grads) {
      grads->assign(L, {});
      std::vector<double> dout = dlogits;
      for (int l = L - 1; l >= 0; --l) {
        const void* in = l == 0 ? static_cast<const void*>(tokens.data()) : acts[l].data();
        std::vector<double> din(activation_grad_elements(m, l, L, B));
        layer_backward_input(c, layouts[l], weights[l].data(), in, dout.data(), din.data(), stash[l]);
        (*grads)[l].assign(layouts[l].size(), 0.0);
        layer_backward_weight(c, layouts[l], in, dout.data(), (*grads)[l].data(), stash[l]);
        dout = din;
      }
    }
    return sum * scale + extra;
  }
};

ModelConfig small_config() {
  ModelConfig m;
  m.vocab = 11, m.dim = 8, m.heads = 2, m.blocks = 2, m.ffn = 12, m.seq = 5, m.microbatch_size = 2;
  return m;
}

void check_all_gradients(Net& net) {
  std::vector<std::vector<double>> grads;
  net.loss(&grads);
  const double h = 1e-5;
  int checked = 0;
  for (std::size_t l = 0; l < net.layouts.size(); ++l)
    for (const ParamSpec& p : net.layouts[l].params())
      for (long e = p.offset; e < p.offset + p.size(); ++e) {
        double& w = net.weights[l][e];
        const double saved = w;
        w = saved + h;
        double up = net.loss(nullptr);
        w = saved - h;
        double down = net.loss(nullptr);
        w = saved;
        double numeric = (up - down) / (2 * h), analytic = grads[l][e];
        double err = std::abs(numeric - analytic);
        INFO(p.name << " element " << e - p.offset << ": analytic " << analytic << " numeric " << numeric);
        CHECK((err <= 1e-6 * std::abs(numeric) || err <= 1e-8));
        ++checked;
      }
  CHECK(checked == net.m.parameters());
}

}  // namespace

TEST_CASE("exec model: every parameter's gradient matches central differences (fp64), one layer") {
  Net net(small_config(), 1);
  check_all_gradients(net);
}

TEST_CASE("exec model: every parameter's gradient matches central differences (fp64), two layers") {
  Net net(small_config(), 2);
  check_all_gradients(net);
}

TEST_CASE("exec model: a middle layer without embedding or head passes its gradient through") {
  ModelConfig m = small_config();
  m.blocks = 3;
  Net net(m, 3);
  check_all_gradients(net);
}

TEST_CASE("exec model: the layer split does not change the loss or the gradients") {
  ModelConfig m = small_config();
  m.blocks = 2;
  Net one(m, 1), two(m, 2);
  std::vector<std::vector<double>> g1, g2;
  double l1 = one.loss(&g1), l2 = two.loss(&g2);
  // the same seed initialises the same parameters whatever the split (the perturbation differs by layout: undo it)
  (void)l1, (void)l2;
  for (const LayerLayout& lay : two.layouts)
    for (const ParamSpec& p : lay.params()) {
      const ParamSpec* q = nullptr;
      for (const ParamSpec& c : one.layouts[0].params())
        if (c.name == p.name) q = &c;
      REQUIRE(q);
      std::vector<float> a(p.size()), b(p.size());
      init_parameters(lay, 7, p.offset, p.offset + p.size(), a.data());
      init_parameters(one.layouts[0], 7, q->offset, q->offset + q->size(), b.data());
      CHECK(a == b);
    }
}

TEST_CASE("exec model: partition rule and its error") {
  ModelConfig m = small_config();
  m.blocks = 4;
  auto p = partition(m, 2);
  REQUIRE(p.size() == 2);
  CHECK(p[0].first_block == 0);
  CHECK(p[0].num_blocks == 2);
  CHECK(p[0].embedding);
  CHECK_FALSE(p[0].head);
  CHECK(p[1].first_block == 2);
  CHECK(p[1].head);
  CHECK_THROWS_WITH_AS(partition(m, 3), doctest::Contains("try --blocks 6"), std::invalid_argument);
}

// ---- Mixture of Experts (exec/moe.h) ----

namespace {

// small_config with blocks 1 and 2 MoE blocks of 3 experts, top-2 (block 0 dense).
ModelConfig moe_config() {
  ModelConfig m = small_config();
  m.blocks = 3, m.experts = 3, m.top_k = 2, m.dense_blocks = 1;
  return m;
}

}  // namespace

TEST_CASE("exec model MoE: every parameter's gradient (router, experts, the rest) matches central differences (fp64)") {
  // Routing is piecewise constant in the weights: a perturbation of 1e-5 could flip a near-tie of two logits,
  // which would show as a numeric gradient of order 1/h. The fixed initialisation has no such tie (checked by
  // the test passing; any other seed would be checked the same way).
  Net one(moe_config(), 1);
  check_all_gradients(one);
  Net three(moe_config(), 3);  // an MoE block alone in a middle layer, and one with the LM head
  check_all_gradients(three);
}

TEST_CASE("exec model MoE: one expert, top-1, computes the dense FFN with the same weights") {
  // An independent reference for the routed path: gate 1 for the one expert, so the block is the dense block.
  ModelConfig dense = small_config(), moe = small_config();
  moe.experts = 1, moe.top_k = 1, moe.dense_blocks = 1;
  Net d(dense, 1), e(moe, 1);
  // Give the MoE model the dense model's weights (its router is unused: a softmax over one logit).
  for (const ParamSpec& p : e.layouts[0].params()) {
    std::string name = p.name;
    const auto at = name.find("experts.0.");
    if (at != std::string::npos) name.erase(at, 10);
    const ParamSpec* q = nullptr;
    for (const ParamSpec& c : d.layouts[0].params())
      if (c.name == name) q = &c;
    if (!q) {
      CHECK(p.role == ParamRole::Router);
      continue;
    }
    REQUIRE(q->size() == p.size());
    std::copy(d.weights[0].begin() + q->offset, d.weights[0].begin() + q->offset + q->size(), e.weights[0].begin() + p.offset);
  }
  std::vector<std::vector<double>> gd, ge;
  const double ld = d.loss(&gd), le = e.loss(&ge);
  CHECK(le == doctest::Approx(ld).epsilon(1e-13));
  for (const ParamSpec& p : e.layouts[0].params())
    if (p.role == ParamRole::Router) {
      for (long i = 0; i < p.size(); ++i) CHECK(ge[0][p.offset + i] == 0.0);  // (one logit: the softmax is constant)
    }
}

TEST_CASE("exec model MoE: the expert-parallel path (route, experts apart, combine) gives the whole block's results") {
  // One schedule layer split as an expert-parallel schedule runs it, with every expert in one slice (so the
  // packed order is the slice's): layer_forward to the packed tokens, experts_forward, moe_layer_combine; then
  // moe_layer_dispatch_backward, experts_backward, layer_backward. Against the whole layer (gradient-checked above).
  ModelConfig m = moe_config();
  m.blocks = 2;  // block 0 dense, block 1 MoE: the MoE block ends the layer
  Net whole(m, 1);
  const LayerSpec spec = partition(m, 1).front();
  const LayerLayout dense(m, spec, 0, 1, ExpertSplit{ExpertSplit::Dense, 0, 1});
  const LayerLayout slice(m, spec, 0, 1, ExpertSplit{ExpertSplit::Slice, 0, 1});
  auto take = [&](const LayerLayout& lay) {  // the whole layer's values of `lay`'s parameters
    std::vector<double> w(lay.size());
    for (const ParamSpec& p : lay.params())
      for (const ParamSpec& q : whole.layouts[0].params())
        if (q.name == p.name) std::copy(whole.weights[0].begin() + q.offset, whole.weights[0].begin() + q.offset + q.size(), w.begin() + p.offset);
    return w;
  };
  const std::vector<double> Wd = take(dense), We = take(slice);
  CHECK(Wd.size() + We.size() == whole.weights[0].size());
  std::vector<std::vector<double>> g_whole;
  const double l_whole = whole.loss(&g_whole);

  ModelContext<double>& c = whole.c;
  const int B = m.microbatch_size;
  const long n = m.tokens_per_microbatch(), pairs = n * m.top_k;
  LayerStash st;
  std::vector<double> packed(layer_output_elements(dense, B));
  CHECK(static_cast<long>(packed.size()) == pairs * m.dim);
  layer_forward(c, dense, Wd.data(), whole.tokens.data(), B, packed.data(), &st);
  const MoeRouting& routing = moe_layer_routing(st);
  const long e_off = slice.block(1).experts;
  BufferPtr y = whole.alloc.allocate(pairs * m.dim * sizeof(double));
  experts_forward(whole.k, whole.alloc, We.data() + e_off, m.dim, m.ffn, routing.counts, packed.data(), y->as<double>());
  std::vector<double> logits(n * m.vocab), dlogits(logits.size());
  moe_layer_combine(c, dense, Wd.data(), y, logits.data(), st);
  double sum = 0;
  const double scale = 1.0 / static_cast<double>(n);
  loss_forward_backward(c, m, logits.data(), whole.targets.data(), B, scale, dlogits.data(), &sum);
  CHECK(sum * scale == doctest::Approx(l_whole).epsilon(1e-13));
  BufferPtr dl = whole.alloc.allocate(dlogits.size() * sizeof(double));
  std::copy(dlogits.begin(), dlogits.end(), dl->as<double>());
  std::vector<double> dy(pairs * m.dim), dx(pairs * m.dim), gd(Wd.size()), ge(We.size());
  moe_layer_dispatch_backward(c, dense, Wd.data(), dl, dy.data(), st);
  experts_backward(whole.k, whole.alloc, We.data() + e_off, m.dim, m.ffn, routing.counts, packed.data(), dy.data(),
                   dx.data(), ge.data() + e_off);
  layer_backward(c, dense, Wd.data(), whole.tokens.data(), dx.data(), static_cast<double*>(nullptr), gd.data(), st);
  auto compare = [&](const LayerLayout& lay, const std::vector<double>& g) {
    for (const ParamSpec& p : lay.params())
      for (const ParamSpec& q : whole.layouts[0].params())
        if (q.name == p.name)
          for (long i = 0; i < p.size(); ++i) {
            INFO(p.name << " element " << i);
            CHECK(g[p.offset + i] == doctest::Approx(g_whole[0][q.offset + i]).epsilon(1e-12).scale(1e-14));
          }
  };
  compare(dense, gd);
  compare(slice, ge);
}

TEST_CASE("exec model MoE: token dropping keeps each expert's pairs of the largest gates, per group, up to capacity") {
  // The router is the identity (d = E), so the logits are the tokens' inputs. Two groups (microbatches) of 4 tokens
  // over 4 experts, top-2, capacity factor 0.5: each expert keeps ceil(0.5·4·2/4) = 1 pair a group.
  CpuKernels<double> k;
  HostAllocator alloc;
  const int E = 4, K = 2;
  const std::vector<double> group{2, 1, 0, -1,   // token 0: experts 0 (gate 0.73) and 1 (0.27)
                                  1, 2, 0, -1,   // token 1: 1 (0.73), 0 (0.27)
                                  3, 0, -1, -2,  // token 2: 0 (0.95), 1 (0.05)
                                  0, 0.5, -1, -2};  // token 3: 1 (0.62), 0 (0.38)
  std::vector<double> x = group;
  x.insert(x.end(), group.begin(), group.end());
  std::vector<double> router(E * E, 0.0);
  for (int e = 0; e < E; ++e) router[e * E + e] = 1;
  CHECK(expert_capacity(0.5, 4, K, E) == 1);
  CHECK(expert_capacity(1.0, 4, K, E) == 2);
  CHECK(expert_capacity(100, 4, K, E) == 8);  // (at most every pair of the group)
  const MoeRouting r = moe_route(k, alloc, x.data(), router.data(), 8, E, E, K, true, 0, 0.5, 4);
  // Kept: expert 0 token 2's (0.95 over 0.73, 0.38, 0.27), expert 1 token 1's (0.73 over 0.62, 0.27, 0.05).
  CHECK(r.kept == 4);
  CHECK(r.pairs() == 4);
  CHECK(r.counts == std::vector<long>{2, 2, 0, 0});
  std::vector<int> row(16);
  k.to_host(row.data(), r.pair_row->data(), row.size() * sizeof(int));
  // Rows by expert, then token: expert 0's tokens 2 and 6, then expert 1's tokens 1 and 5.
  // (pair t·2 + s: token 1's slot 0 is pair 2, token 2's pair 4; the second group's tokens 5 and 6, pairs 10, 12)
  CHECK(row == std::vector<int>{-1, -1, 2, -1, 0, -1, -1, -1, -1, -1, 3, -1, 1, -1, -1, -1});
  const RoutingDigest d = routing_digest(r, 0, 4);
  CHECK(d.counts == std::vector<int>{1, 1, 0, 0, 3, 3, 0, 0});  // kept, then dropped, per expert
  // The tokens at expert 0's capacity edge (2 kept, 0 dropped) are as near a tie as their gates.
  const double g0 = 1 / (1 + std::exp(-1.0)), g2 = 1 / (1 + std::exp(-3.0));
  CHECK(r.margins[0] <= (g2 - g0) / g2 + 1e-12);
  CHECK(r.margins[2] <= (g2 - g0) / g2 + 1e-12);
  // Dropless: the same tokens' every pair, and a digest of E counts.
  const MoeRouting all = moe_route(k, alloc, x.data(), router.data(), 8, E, E, K);
  CHECK(all.kept == 16);
  CHECK(routing_digest(all, 0, 4).counts == std::vector<int>{4, 4, 0, 0});
  CHECK_THROWS_WITH_AS(moe_route(k, alloc, x.data(), router.data(), 8, E, E, K, false, 0, 0.5, 3),
                       doctest::Contains("are not whole groups"), std::invalid_argument);
  // The combine adds no term for a dropped pair, and its gate gets no grad.
  std::vector<double> h(8 * E, 0.5), y(4 * E, 1.0), out(8 * E), dy(4 * E), dgates(16);
  std::vector<double> gates(16);
  k.to_host(gates.data(), r.gates->data(), gates.size() * sizeof(double));
  k.moe_combine(h.data(), y.data(), row.data(), gates.data(), out.data(), 8, K, E);
  CHECK(out[0] == 0.5);                                // token 0: both pairs dropped, the residual alone
  CHECK(out[2 * E] == doctest::Approx(0.5 + g2));      // token 2: its kept pair
  const std::vector<double> dout(8 * E, 1.0);
  k.moe_combine_backward(dout.data(), y.data(), row.data(), gates.data(), dy.data(), dgates.data(), 8, K, E);
  CHECK(dgates[0] == 0);
  CHECK(dgates[4] == doctest::Approx(E));  // (token 2, slot 0: dout · y)
}

TEST_CASE("exec model MoE: with token dropping every parameter's gradient still matches central differences") {
  // Capacity factor 0.3: 3 experts keep at most ceil(0.3·n·2/3) pairs each of a microbatch's 2n, so some drop.
  ModelConfig m = moe_config();
  m.capacity_factor = 0.3;
  CHECK(3 * expert_capacity(m.capacity_factor, m.tokens_per_microbatch(), m.top_k, m.experts) <
        m.tokens_per_microbatch() * m.top_k);
  Net one(m, 1);
  check_all_gradients(one);
}

TEST_CASE("exec model MoE: with the load-balancing loss every parameter's gradient matches central differences") {
  // The objective: the cross-entropy plus each MoE block's Switch Transformer loss (Fedus et al. 2021, eq. 4, f_e over
  // the n·k pairs), computed here from the routing alone: α·E·Σ_e f_e·P_e, f_e the fraction of the microbatch's
  // (token, slot) pairs at expert e, P_e the mean over its tokens of the softmax of all E router logits. Its value
  // is what the kernels sum (c.aux_loss_sum), and its gradient is in the analytic one (the counts held fixed, as
  // PyTorch's autograd holds them: an integer count has none).
  for (double capacity : {0.0, 0.3}) {  // (dropping or not, the counts are the router's choice)
    CAPTURE(capacity);
    ModelConfig m = moe_config();
    m.aux_loss_coeff = 0.3;  // (large beside the cross-entropy, so a wrong gradient shows)
    m.capacity_factor = capacity;
    Net net(m, 1);
    double summed = 0;
    net.c.microbatch_weight = 1, net.c.aux_loss_sum = &summed;
    double independent = 0;
    net.c.on_route = [&net, &independent](int, const MoeRouting& r) {
      REQUIRE(r.logits);
      const double* z = r.logits->as<double>();
      const long n = r.tokens;
      const int E = r.experts, K = r.top_k;
      std::vector<double> f(E, 0), P(E, 0);
      for (long i = 0; i < n * K; ++i) f[r.host_idx[i]] += 1.0 / (n * K);
      for (long t = 0; t < n; ++t) {
        double sum = 0;
        for (int e = 0; e < E; ++e) sum += std::exp(z[t * E + e]);
        for (int e = 0; e < E; ++e) P[e] += std::exp(z[t * E + e]) / sum / n;
      }
      double aux = 0;
      for (int e = 0; e < E; ++e) aux += net.m.aux_loss_coeff * E * f[e] * P[e];
      net.extra += aux;
      independent += aux;
    };
    std::vector<std::vector<double>> grads;
    const double with = net.loss(&grads);
    CHECK(independent > 0);
    CHECK(summed == doctest::Approx(independent).epsilon(1e-12));  // (two MoE blocks' values)
    CHECK(net.extra == independent);  // (the loss the gradients are checked against holds it)
    CHECK(with > independent);
    check_all_gradients(net);
    // Without the loss, the router's gradient differs (the check above would fail on the objective without it).
    ModelConfig without = m;
    without.aux_loss_coeff = 0;
    Net plain(without, 1);
    std::vector<std::vector<double>> plain_grads;
    plain.loss(&plain_grads);
    const ParamSpec* router = nullptr;
    for (const ParamSpec& p : net.layouts[0].params())
      if (p.name.find("router") != std::string::npos) router = &p;
    REQUIRE(router);
    double diff = 0;
    for (long e = router->offset; e < router->offset + router->size(); ++e)
      diff = std::max(diff, std::abs(grads[0][e] - plain_grads[0][e]));
    CHECK(diff > 1e-4);
  }
}

TEST_CASE("exec model MoE: the router's top-k and gates, ties to the lower expert, and their gradient") {
  CpuKernels<double> k;
  // Two tokens over 4 experts, top-2: token 1 has a tie between experts 1 and 3.
  const std::vector<double> logits{0.5, -1.0, 2.0, 1.0, 0.0, 3.0, -2.0, 3.0};
  std::vector<int> idx(4);
  std::vector<double> gates(4);
  k.moe_topk(logits.data(), idx.data(), gates.data(), 2, 4, 2);
  CHECK(idx == std::vector<int>{2, 3, 1, 3});
  const double e = std::exp(-1.0);
  CHECK(gates[0] == doctest::Approx(1 / (1 + e)));
  CHECK(gates[1] == doctest::Approx(e / (1 + e)));
  CHECK(gates[2] == doctest::Approx(0.5));
  // d(Σ w_s·gate_s)/dlogits against central differences (the selection held fixed: no near-tie in token 0).
  const std::vector<double> w{0.7, -1.3, 0.2, 0.9};
  std::vector<double> dlogits(8);
  k.moe_topk_backward(idx.data(), gates.data(), w.data(), dlogits.data(), 2, 4, 2);
  for (int j = 0; j < 4; ++j) {
    std::vector<double> up = logits, down = logits;
    up[j] += 1e-6, down[j] -= 1e-6;
    std::vector<int> i2(4);
    std::vector<double> gu(4), gdn(4);
    k.moe_topk(up.data(), i2.data(), gu.data(), 1, 4, 2);
    k.moe_topk(down.data(), i2.data(), gdn.data(), 1, 4, 2);
    const double numeric = (w[0] * (gu[0] - gdn[0]) + w[1] * (gu[1] - gdn[1])) / 2e-6;
    CHECK(dlogits[j] == doctest::Approx(numeric).epsilon(1e-6).scale(1e-9));
  }
}
