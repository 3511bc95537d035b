#include "exec/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

namespace trainsim::exec {

std::size_t MoeState::bytes() const {
  std::size_t n = 0;
  for (const BufferPtr* b : {&routing.idx, &routing.gates, &routing.pair_row, &routing.pair_token, &x_pairs, &y_pairs,
                             &gu_pairs, &act_pairs, &dgates, &dy_pairs, &dlogits, &dlayer_out, &experts_dw,
                             &routing.logits, &aux_coeffs})
    n += *b ? (*b)->bytes() : 0;
  return n;
}

long expert_capacity(double capacity_factor, long tokens, int top_k, int experts) {
  const double c = std::ceil(capacity_factor * static_cast<double>(tokens) * top_k / experts);
  return static_cast<long>(std::min(c, static_cast<double>(tokens) * top_k));
}

template <typename T>
MoeRouting moe_route(Kernels<T>& k, Allocator& alloc, const T* xn, const T* Wr, long n, int d, int E, int top_k,
                     bool margins, int misroute, double capacity_factor, long group, bool keep_logits) {
  MoeRouting r;
  r.tokens = n, r.experts = E, r.top_k = top_k;
  const long pairs = n * top_k;
  BufferPtr logits = alloc.allocate(static_cast<std::size_t>(n) * E * sizeof(T));
  k.gemm(false, true, static_cast<int>(n), E, d, T(1), xn, d, Wr, d, T(0), logits->as<T>(), E);
  r.idx = alloc.allocate(static_cast<std::size_t>(pairs) * sizeof(int));
  r.gates = alloc.allocate(static_cast<std::size_t>(pairs) * sizeof(T));
  k.moe_topk(logits->as<T>(), r.idx->as<int>(), r.gates->as<T>(), n, E, top_k);
  // The packed order, on the host: by expert, then token.
  std::vector<int> idx(pairs), pair_row(pairs), pair_token(pairs);
  k.to_host(idx.data(), r.idx->data(), idx.size() * sizeof(int));
  if (misroute > 0 && top_k < E) {  // (fault injection)
    for (long t = 0; t < std::min<long>(misroute, n); ++t) {
      int e = 0;
      while (std::find(idx.begin() + t * top_k, idx.begin() + (t + 1) * top_k, e) != idx.begin() + (t + 1) * top_k) ++e;
      idx[t * top_k + top_k - 1] = e;
    }
    k.to_device(r.idx->data(), idx.data(), idx.size() * sizeof(int));
  }
  for (int e : idx)
    if (e < 0 || e >= E) throw std::logic_error("the router chose an expert out of range");
  // Token dropping: in each group, each expert's pairs beyond its capacity, the smallest gates first (a NaN gate
  // the smallest); the pairs at a capacity's edge are as near a tie as their gates.
  std::vector<char> dropped;
  std::vector<double> edge(margins ? n : 0, std::numeric_limits<double>::infinity());
  if (capacity_factor > 0) {
    if (group <= 0 || n % group)
      throw std::invalid_argument(fmt::format("token dropping routes groups of {} tokens, and {} tokens are not whole "
                                              "groups",
                                              group, n));
    std::vector<T> g(pairs);
    k.to_host(g.data(), r.gates->data(), g.size() * sizeof(T));
    auto key = [&g](long i) { return std::isnan(g[i]) ? -std::numeric_limits<double>::infinity() : double(g[i]); };
    const long cap = expert_capacity(capacity_factor, group, top_k, E);
    dropped.assign(pairs, 0);
    std::vector<std::vector<long>> mine(E);
    for (long first = 0; first < n; first += group) {
      for (auto& v : mine) v.clear();
      for (long i = first * top_k; i < (first + group) * top_k; ++i) mine[idx[i]].push_back(i);  // (token order)
      for (auto& v : mine) {
        if (static_cast<long>(v.size()) <= cap) continue;
        std::stable_sort(v.begin(), v.end(), [&key](long a, long b) { return key(a) > key(b); });
        for (std::size_t x = cap; x < v.size(); ++x) dropped[v[x]] = 1;
        if (margins) {
          const double gap = (key(v[cap - 1]) - key(v[cap])) / std::max(std::abs(key(v.front())), 1e-30);
          for (long i : {v[cap - 1], v[cap]}) edge[i / top_k] = std::min(edge[i / top_k], gap);
        }
      }
    }
  }
  r.counts.assign(E, 0);
  for (long i = 0; i < pairs; ++i)
    if (dropped.empty() || !dropped[i]) ++r.counts[idx[i]];
  std::vector<long> next(E, 0);
  for (int e = 1; e < E; ++e) next[e] = next[e - 1] + r.counts[e - 1];
  for (long t = 0; t < n; ++t)  // (tokens in order: each expert's rows in token order)
    for (int s = 0; s < top_k; ++s) {
      const long i = t * top_k + s;
      if (!dropped.empty() && dropped[i]) {
        pair_row[i] = -1;
        continue;
      }
      const long row = next[idx[i]]++;
      pair_row[i] = static_cast<int>(row);
      pair_token[row] = static_cast<int>(t);
      ++r.kept;
    }
  if (margins) {
    std::vector<T> z(static_cast<std::size_t>(n) * E);
    k.to_host(z.data(), logits->data(), z.size() * sizeof(T));
    r.margins.assign(n, std::numeric_limits<double>::infinity());
    for (long t = 0; t < n && top_k < E; ++t) {
      const T* row = z.data() + t * E;
      double kth = std::numeric_limits<double>::infinity(), scale = 0;
      for (int s = 0; s < top_k; ++s) kth = std::min(kth, static_cast<double>(row[idx[t * top_k + s]]));
      double next = -std::numeric_limits<double>::infinity();
      for (int e = 0; e < E; ++e) {
        scale = std::max(scale, std::abs(static_cast<double>(row[e])));
        bool chosen = false;
        for (int s = 0; s < top_k; ++s) chosen = chosen || idx[t * top_k + s] == e;
        if (!chosen) next = std::max(next, static_cast<double>(row[e]));
      }
      r.margins[t] = (kth - next) / std::max(scale, 1e-30);
    }
    for (long t = 0; t < n; ++t) r.margins[t] = std::min(r.margins[t], edge[t]);
  }
  r.host_idx = std::move(idx);
  r.host_dropped = std::move(dropped);
  r.pair_row = alloc.allocate(static_cast<std::size_t>(pairs) * sizeof(int));
  r.pair_token = alloc.allocate(static_cast<std::size_t>(std::max(r.kept, 1L)) * sizeof(int));
  k.to_device(r.pair_row->data(), pair_row.data(), pair_row.size() * sizeof(int));
  k.to_device(r.pair_token->data(), pair_token.data(), static_cast<std::size_t>(r.kept) * sizeof(int));
  if (keep_logits) r.logits = std::move(logits);
  return r;
}

std::vector<double> routed_counts(const MoeRouting& r, long group) {
  if (group <= 0 || r.tokens % group)
    throw std::invalid_argument(fmt::format("routed counts of groups of {} tokens, and {} tokens are not whole groups",
                                            group, r.tokens));
  std::vector<double> counts(static_cast<std::size_t>(r.tokens / group) * r.experts, 0.0);
  for (long i = 0; i < r.tokens * r.top_k; ++i)
    counts.at(static_cast<std::size_t>(i / r.top_k / group * r.experts + r.host_idx.at(i))) += 1;
  return counts;
}

void moe_aux_coefficients(std::vector<double>& counts, double alpha, int experts, int top_k, long tokens) {
  const double n = static_cast<double>(tokens), c = alpha * experts / top_k / (n * n);
  for (double& x : counts) x *= c;
}

RoutingDigest routing_digest(const MoeRouting& r, long first, long count, int seq, int shard, int shards) {
  RoutingDigest d;
  auto dropped = [&r](long i) { return !r.host_dropped.empty() && r.host_dropped.at(static_cast<std::size_t>(i)); };
  d.shard = shard, d.shards = shards;
  const long per = shards > 1 ? seq / shards : 1;  // a sequence's rows in one shard
  for (long t = 0; t < count; ++t) {
    const long token = shards > 1 ? (t / per) * seq + shard * per + t % per : t;  // its index in the microbatch
    std::uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](std::uint32_t v) {
      for (int b = 0; b < 4; ++b) h = (h ^ ((v >> (8 * b)) & 0xff)) * 0x100000001b3ull;
    };
    mix(static_cast<std::uint32_t>(token));
    for (long i = (first + t) * r.top_k; i < (first + t + 1) * r.top_k; ++i)  // (a dropped pair: expert E + e)
      mix(static_cast<std::uint32_t>(r.host_idx.at(static_cast<std::size_t>(i)) + (dropped(i) ? r.experts : 0)));
    d.hash += h;
  }
  d.counts.assign(r.host_dropped.empty() ? r.experts : 2 * r.experts, 0);
  for (long i = first * r.top_k; i < (first + count) * r.top_k; ++i)
    ++d.counts.at(r.host_idx.at(static_cast<std::size_t>(i)) + (dropped(i) ? r.experts : 0));
  d.min_margin = std::numeric_limits<double>::infinity();
  if (!r.margins.empty())
    for (long t = first; t < first + count; ++t) d.min_margin = std::min(d.min_margin, r.margins.at(static_cast<std::size_t>(t)));
  return d;
}

void add_shard(RoutingDigest& into, const RoutingDigest& part) {
  into.hash += part.hash;
  if (into.counts.size() < part.counts.size()) into.counts.resize(part.counts.size(), 0);
  for (std::size_t e = 0; e < part.counts.size(); ++e) into.counts[e] += part.counts[e];
  into.min_margin = std::min(into.min_margin, part.min_margin);
}

template <typename T>
void moe_pack(Kernels<T>& k, const MoeRouting& r, const T* x, T* out, int d) {
  k.gather_rows(x, r.pair_token->template as<int>(), out, r.pairs(), d);
}

template <typename T>
void experts_forward(Kernels<T>& k, Allocator& alloc, const T* W, int d, int f, const std::vector<long>& counts,
                     const T* x, T* y, T* gu, T* act) {
  long row = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const long c = counts[i];
    if (c == 0) continue;
    const T* wgu = W + static_cast<long>(i) * expert_elements(d, f);
    const T* wdown = wgu + 2L * f * d;
    BufferPtr gu_local, act_local;
    if (!gu) gu_local = alloc.allocate(static_cast<std::size_t>(c) * 2 * f * sizeof(T));
    if (!act) act_local = alloc.allocate(static_cast<std::size_t>(c) * f * sizeof(T));
    T* g = gu ? gu + row * 2 * f : gu_local->template as<T>();
    T* a = act ? act + row * f : act_local->template as<T>();
    const int rows = static_cast<int>(c);
    k.gemm(false, true, rows, 2 * f, d, T(1), x + row * d, d, wgu, d, T(0), g, 2 * f);
    k.swiglu_forward(g, a, c, f);
    k.gemm(false, true, rows, d, f, T(1), a, f, wdown, f, T(0), y + row * d, d);
    row += c;
  }
}

template <typename T>
void experts_backward(Kernels<T>& k, Allocator& alloc, const T* W, int d, int f, const std::vector<long>& counts,
                      const T* x, const T* dy, T* dx, T* dW, const T* gu, const T* act) {
  long row = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const long c = counts[i];
    const long at = static_cast<long>(i) * expert_elements(d, f);
    T* dwgu = dW + at;
    T* dwdown = dwgu + 2L * f * d;
    if (c == 0) {  // no token reached it: no grad
      k.fill(dwgu, T(0), expert_elements(d, f));
      continue;
    }
    const T* wgu = W + at;
    const T* wdown = wgu + 2L * f * d;
    const int rows = static_cast<int>(c);
    const T* xi = x + row * d;
    const T* dyi = dy + row * d;
    BufferPtr gu_local, act_local;
    const T* g = gu ? gu + row * 2 * f : nullptr;
    const T* a = act ? act + row * f : nullptr;
    if (!g || !a) {  // recompute the forward's pre-activations and activations (the same kernels: the same bits)
      gu_local = alloc.allocate(static_cast<std::size_t>(c) * 2 * f * sizeof(T));
      act_local = alloc.allocate(static_cast<std::size_t>(c) * f * sizeof(T));
      k.gemm(false, true, rows, 2 * f, d, T(1), xi, d, wgu, d, T(0), gu_local->as<T>(), 2 * f);
      k.swiglu_forward(gu_local->as<T>(), act_local->as<T>(), c, f);
      g = gu_local->as<T>(), a = act_local->as<T>();
    }
    BufferPtr dact = alloc.allocate(static_cast<std::size_t>(c) * f * sizeof(T));
    k.gemm(false, false, rows, f, d, T(1), dyi, d, wdown, f, T(0), dact->as<T>(), f);
    BufferPtr dgu = alloc.allocate(static_cast<std::size_t>(c) * 2 * f * sizeof(T));
    k.swiglu_backward(g, dact->as<T>(), dgu->as<T>(), c, f);
    k.gemm(false, false, rows, d, 2 * f, T(1), dgu->as<T>(), 2 * f, wgu, d, T(0), dx + row * d, d);
    k.gemm(true, false, d, f, rows, T(1), dyi, d, a, f, T(0), dwdown, f);
    k.gemm(true, false, 2 * f, d, rows, T(1), dgu->as<T>(), 2 * f, xi, d, T(0), dwgu, d);
    row += c;
  }
}

#define TRAINSIM_INSTANTIATE(T)                                                                                        \
  template MoeRouting moe_route<T>(Kernels<T>&, Allocator&, const T*, const T*, long, int, int, int, bool, int,      \
                                   double, long, bool);                                                                \
  template void moe_pack<T>(Kernels<T>&, const MoeRouting&, const T*, T*, int);                                        \
  template void experts_forward<T>(Kernels<T>&, Allocator&, const T*, int, int, const std::vector<long>&, const T*,   \
                                   T*, T*, T*);                                                                        \
  template void experts_backward<T>(Kernels<T>&, Allocator&, const T*, int, int, const std::vector<long>&, const T*,  \
                                    const T*, T*, T*, const T*, const T*);
TRAINSIM_INSTANTIATE(float)
TRAINSIM_INSTANTIATE(double)
#undef TRAINSIM_INSTANTIATE

}  // namespace trainsim::exec
