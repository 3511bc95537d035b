#include "exec/layout.h"

#include <cmath>
#include <numbers>

namespace trainsim::exec {

LayerLayout::LayerLayout(const ModelConfig& model, const LayerSpec& spec) : model_(model), spec_(spec) {
  const long d = model.dim, f = model.ffn, v = model.vocab;
  const float out_std = model.init_std / std::sqrt(2.0f * static_cast<float>(model.blocks));  // GPT-2's residual scaling
  auto add = [&](std::string name, ParamRole role, int block, long rows, long cols, bool decay, float std) {
    params_.push_back(ParamSpec{std::move(name), role, block, rows, cols, size_, decay, std});
    size_ += rows * cols;
    return params_.back().offset;
  };
  if (spec.embedding) embedding_ = add("embedding", ParamRole::Embedding, -1, v, d, true, model.init_std);
  for (int k = 0; k < spec.num_blocks; ++k) {
    int b = spec.first_block + k;
    std::string p = "blocks." + std::to_string(b) + ".";
    BlockOffsets o;
    o.attn_norm = add(p + "attn_norm", ParamRole::AttnNorm, b, d, 1, false, 0);
    o.wqkv = add(p + "wqkv", ParamRole::Wqkv, b, 3 * d, d, true, model.init_std);
    o.wo = add(p + "wo", ParamRole::Wo, b, d, d, true, out_std);
    o.ffn_norm = add(p + "ffn_norm", ParamRole::FfnNorm, b, d, 1, false, 0);
    o.wgu = add(p + "wgu", ParamRole::Wgu, b, 2 * f, d, true, model.init_std);
    o.wdown = add(p + "wdown", ParamRole::Wdown, b, d, f, true, out_std);
    blocks_.push_back(o);
  }
  if (spec.head) {
    final_norm_ = add("final_norm", ParamRole::FinalNorm, -1, d, 1, false, 0);
    head_ = add("head", ParamRole::Head, -1, v, d, true, model.init_std);
  }
}

long shard_chunk(long size, int num_shards) { return (size + num_shards - 1) / num_shards; }

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Standard normal draw number `i` of the stream `key`.
double normal(std::uint64_t key, std::uint64_t i) {
  std::uint64_t r = splitmix64(key ^ splitmix64(i));
  double u1 = (static_cast<double>(r >> 32) + 0.5) / 4294967296.0;  // (0, 1)
  double u2 = static_cast<double>(r & 0xffffffffull) / 4294967296.0;  // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

void init_parameters(const LayerLayout& layout, std::uint64_t seed, long begin, long end, float* out) {
  for (long e = begin; e < end; ++e) out[e - begin] = 0.0f;
  for (const ParamSpec& p : layout.params()) {
    long lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.size());
    if (lo >= hi) continue;
    std::uint64_t key = splitmix64(seed ^ fnv1a(p.name));
    for (long e = lo; e < hi; ++e)
      out[e - begin] = p.init_std == 0 ? 1.0f
                                       : static_cast<float>(p.init_std * normal(key, static_cast<std::uint64_t>(e - p.offset)));
  }
}

int floats_per_element(TensorKind kind) { return kind == TensorKind::OptState ? 2 : 1; }

}  // namespace trainsim::exec
