#include "exec/sampling.h"

#include "exec/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "exec/cpu/cpu_kernels.h"
#include "exec/model.h"
#include "exec/whole_model.h"

namespace trainsim::exec {

namespace {

CpuKernels<float>& kernels() {
  thread_local CpuKernels<float> k;
  return k;
}

}  // namespace

Generator::Generator(const ModelConfig& model, std::vector<float> flat)
    : model_(model), layout_(whole_model_layout(model)), w_(std::move(flat)) {
  if (w_.size() != static_cast<std::size_t>(layout_.size()))
    throw std::invalid_argument(fmt::format("the model has {} parameters, not {}", w_.size(), layout_.size()));
  rope_tables(model_, cos_, sin_);
  const std::size_t d = model_.dim, f = model_.ffn;
  const std::size_t cache = static_cast<std::size_t>(model_.blocks) * model_.seq * d;
  k_cache_.assign(cache, 0.0f), v_cache_.assign(cache, 0.0f);
  x_.resize(d), xn_.resize(d), qkv_.resize(3 * d), q_.resize(d), k_.resize(d), v_.resize(d), att_.resize(d);
  h_.resize(d), gu_.resize(2 * f), act_.resize(f), y_.resize(d), scores_.resize(model_.seq);
  logits_.resize(model_.vocab);
  router_.resize(model_.experts), idx_.resize(model_.top_k), gates_.resize(model_.top_k);
}

const std::vector<float>& Generator::feed(int token) {
  if (token < 0 || token >= model_.vocab)
    throw std::invalid_argument(fmt::format("token {} is outside the vocabulary (0 to {})", token, model_.vocab - 1));
  if (pos_ >= model_.seq) throw std::logic_error("the context is full: reset the generator first");
  CpuKernels<float>& k = kernels();
  const int d = model_.dim, f = model_.ffn, H = model_.heads, hd = model_.head_dim(), half = hd / 2;
  const float eps = model_.norm_eps, scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* W = w_.data();
  std::copy_n(W + layout_.embedding_offset() + static_cast<long>(token) * d, d, x_.data());
  for (int b = 0; b < model_.blocks; ++b) {
    const BlockOffsets& o = layout_.block(b);
    k.rmsnorm_forward(x_.data(), W + o.attn_norm, xn_.data(), &rstd_, 1, d, eps);
    k.gemm(false, true, 1, 3 * d, d, 1.0f, xn_.data(), d, W + o.wqkv, d, 0.0f, qkv_.data(), 3 * d);
    // (the rotary tables' row of this position: a sequence of one token at position pos_)
    k.split_heads_rope(qkv_.data(), q_.data(), k_.data(), v_.data(), 1, 1, H, hd, cos_.data() + pos_ * half,
                       sin_.data() + pos_ * half);
    for (int h = 0; h < H; ++h) {
      const std::size_t base = ((static_cast<std::size_t>(b) * H + h) * model_.seq) * hd;
      std::copy_n(k_.data() + h * hd, hd, k_cache_.data() + base + static_cast<std::size_t>(pos_) * hd);
      std::copy_n(v_.data() + h * hd, hd, v_cache_.data() + base + static_cast<std::size_t>(pos_) * hd);
      // Causal attention of this query over positions 0 .. pos_ (exec/cpu causal_softmax_forward's arithmetic).
      const float* qh = q_.data() + h * hd;
      float mx = 0;
      for (int j = 0; j <= pos_; ++j) {
        const float* kj = k_cache_.data() + base + static_cast<std::size_t>(j) * hd;
        float s = 0;
        for (int i = 0; i < hd; ++i) s += qh[i] * kj[i];
        scores_[j] = s;
        mx = j == 0 ? s * scale : std::max(mx, s * scale);
      }
      float sum = 0;
      for (int j = 0; j <= pos_; ++j) sum += scores_[j] = std::exp(scores_[j] * scale - mx);
      const float inv = 1.0f / sum;
      float* out = att_.data() + h * hd;
      std::fill_n(out, hd, 0.0f);
      for (int j = 0; j <= pos_; ++j) {
        const float p = scores_[j] * inv;
        const float* vj = v_cache_.data() + base + static_cast<std::size_t>(j) * hd;
        for (int i = 0; i < hd; ++i) out[i] += p * vj[i];
      }
    }
    k.gemm(false, true, 1, d, d, 1.0f, att_.data(), d, W + o.wo, d, 0.0f, h_.data(), d);
    k.add(h_.data(), x_.data(), h_.data(), d);
    k.rmsnorm_forward(h_.data(), W + o.ffn_norm, xn_.data(), &rstd_, 1, d, eps);
    if (o.moe) {  // the token's top-k experts, gated (exec/moe.h: the same router and kernels)
      const int E = model_.experts, K = model_.top_k;
      k.gemm(false, true, 1, E, d, 1.0f, xn_.data(), d, W + o.router, d, 0.0f, router_.data(), E);
      k.moe_topk(router_.data(), idx_.data(), gates_.data(), 1, E, K);
      std::copy_n(h_.data(), d, x_.data());
      for (int s = 0; s < K; ++s) {
        const float* wgu = W + o.experts + static_cast<long>(idx_[s]) * expert_elements(d, f);
        k.gemm(false, true, 1, 2 * f, d, 1.0f, xn_.data(), d, wgu, d, 0.0f, gu_.data(), 2 * f);
        k.swiglu_forward(gu_.data(), act_.data(), 1, f);
        k.gemm(false, true, 1, d, f, 1.0f, act_.data(), f, wgu + 2L * f * d, f, 0.0f, y_.data(), d);
        for (int i = 0; i < d; ++i) x_[i] += gates_[s] * y_[i];
      }
      continue;
    }
    k.gemm(false, true, 1, 2 * f, d, 1.0f, xn_.data(), d, W + o.wgu, d, 0.0f, gu_.data(), 2 * f);
    k.swiglu_forward(gu_.data(), act_.data(), 1, f);
    k.gemm(false, true, 1, d, f, 1.0f, act_.data(), f, W + o.wdown, f, 0.0f, y_.data(), d);
    k.add(y_.data(), h_.data(), x_.data(), d);
  }
  k.rmsnorm_forward(x_.data(), W + layout_.final_norm_offset(), xn_.data(), &rstd_, 1, d, eps);
  k.gemm(false, true, 1, model_.vocab, d, 1.0f, xn_.data(), d, W + layout_.head_offset(), d, 0.0f, logits_.data(),
         model_.vocab);
  ++pos_;
  return logits_;
}

int pick_token(const std::vector<float>& logits, double temperature, int top_k, std::uint64_t seed,
               std::uint64_t counter) {
  const int V = static_cast<int>(logits.size());
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  if (temperature <= 0) return order.front();
  const int k = top_k > 0 ? std::min(top_k, V) : V;
  std::vector<double> p(k);
  const double top = logits[order[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp((logits[order[i]] - top) / temperature);
  // A uniform number in [0, 1) from 53 bits of the stream.
  const double u = static_cast<double>(splitmix64(splitmix64(seed) ^ counter) >> 11) * 0x1.0p-53 * sum;
  double acc = 0;
  for (int i = 0; i < k; ++i)
    if ((acc += p[i]) > u) return order[i];
  return order[k - 1];
}

std::string generate_text(const ModelConfig& model, const std::vector<float>& flat, const SampleOptions& o) {
  if (o.tokens < 1) throw std::invalid_argument(fmt::format("--tokens must be at least 1, got {}", o.tokens));
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw std::invalid_argument(fmt::format("--temperature must be 0 or more, got {}", o.temperature));
  if (o.top_k < 0) throw std::invalid_argument(fmt::format("--top-k must be 0 or more, got {}", o.top_k));
  Generator g(model, flat);
  std::vector<int> context;
  for (unsigned char c : o.prompt.empty() ? std::string("\n") : o.prompt) context.push_back(c);
  // The prompt, as much of its end as the context holds.
  const std::size_t keep = std::min<std::size_t>(context.size(), static_cast<std::size_t>(model.seq));
  context.erase(context.begin(), context.end() - static_cast<long>(keep));
  const std::vector<float>* logits = nullptr;
  for (int t : context) logits = &g.feed(t);
  std::string out;
  for (int i = 0; i < o.tokens; ++i) {
    const int next = pick_token(*logits, o.temperature, o.top_k, o.seed, static_cast<std::uint64_t>(i));
    out += static_cast<char>(next);
    context.push_back(next);
    if (g.position() == model.seq) {  // full: rebuild the cache from the last seq/2 tokens
      g.reset();
      const std::size_t from = context.size() - static_cast<std::size_t>(std::max(1, model.seq / 2));
      context.erase(context.begin(), context.begin() + static_cast<long>(from));
      for (std::size_t j = 0; j + 1 < context.size(); ++j) g.feed(context[j]);
    }
    logits = &g.feed(next);
  }
  return out;
}

}  // namespace trainsim::exec
