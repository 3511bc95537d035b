#include "exec/layout.h"

#include <cmath>
#include <numbers>
#include <stdexcept>

#include <fmt/format.h>

namespace trainsim::exec {

LayerLayout::LayerLayout(const ModelConfig& model, const LayerSpec& spec, int tp_index, int tp_size, ExpertSplit experts)
    : model_(model), spec_(spec), tp_index_(tp_index), tp_size_(tp_size), experts_(experts) {
  const int t = tp_size, j = tp_index;
  if (t < 1 || j < 0 || j >= t)
    throw std::invalid_argument(fmt::format("TP slice {} of {} does not exist", j, t));
  if (experts.kind == ExpertSplit::Slice) {
    if (!model.moe() || experts.count < 1 || model.experts % experts.count || experts.index < 0 ||
        experts.index >= experts.count)
      throw std::invalid_argument(fmt::format("expert slice {} of {} does not exist for a model of {} experts",
                                              experts.index, experts.count, model.experts));
    if (!has_moe())
      throw std::invalid_argument(fmt::format("layer {} holds no MoE block, so no expert slice", spec.index));
  }
  if (experts.kind != ExpertSplit::Inside)  // (the dispatch and combine all-to-alls of a layer end it)
    for (int k = 0; k + 1 < spec.num_blocks; ++k)
      if (model.moe_block(spec.first_block + k))
        throw std::invalid_argument(fmt::format(
            "layer {} holds MoE block {} before other blocks: with expert parallelism each MoE block must be the last "
            "block of its schedule layer (one schedule layer per block: --layers {})",
            spec.index, spec.first_block + k, model.blocks));
  if (t > 1 && spec.num_blocks == 0)
    throw std::invalid_argument(fmt::format(
        "layer {} holds no transformer block (only the {}): the executor runs such a layer without tensor parallelism "
        "only",
        spec.index, spec.embedding ? "embedding" : spec.head ? "final norm and LM head" : "nothing"));
  if (t > 1) {
    std::string bad;
    if (model.heads % t) bad = fmt::format("the heads ({})", model.heads);
    else if (model.ffn % t) bad = fmt::format("the FFN size ({})", model.ffn);
    else if (model.vocab % t) bad = fmt::format("the vocabulary ({})", model.vocab);
    if (!bad.empty())
      throw std::invalid_argument(fmt::format(
          "tensor parallelism over {} ranks splits attention by heads, the MLP by FFN columns and the embedding and LM "
          "head by vocabulary, so the heads ({}), the FFN size ({}) and the vocabulary ({}) must be multiples of {}: {} "
          "is not (--heads and --ffn change them)",
          t, model.heads, model.ffn, model.vocab, t, bad));
  }
  const long d = model.dim, f = model.ffn, v = model.vocab;
  const long dl = d / t, fl = f / t, vl = v / t;  // the slice's attention width, FFN columns, vocabulary rows
  const float out_std = model.init_std / std::sqrt(2.0f * static_cast<float>(model.blocks));  // GPT-2's residual scaling
  // A parameter of the slice: `rows` × `cols` of the whole `full_rows` × `full_cols`, its rows in `blocks` blocks
  // `stride` rows apart starting at row `row0`, its columns from `col0`.
  auto add = [&](std::string name, ParamRole role, int block, long rows, long cols, bool decay, float std, long full_rows,
                 long full_cols, int blocks = 1, long stride = 0, long row0 = 0, long col0 = 0) {
    ParamSpec p{std::move(name), role, block, rows, cols, size_, decay, std};
    p.full_rows = full_rows, p.full_cols = full_cols, p.row_blocks = blocks, p.row_block_stride = stride;
    p.row_start = row0, p.col_start = col0, p.tp_replicated = t > 1 && rows == full_rows && cols == full_cols;
    params_.push_back(std::move(p));
    size_ += rows * cols;
    return params_.back().offset;
  };
  // An MoE block's experts: those of the expert slice, all of them in the plain weight without expert
  // parallelism, none in it with. Under TP (no expert slices) each expert is split as a dense MLP is: the slice's
  // FFN rows of its gate and up projections, those columns of its down projection.
  auto add_experts = [&](const std::string& p, int b, BlockOffsets& o) {
    const int per = experts.kind == ExpertSplit::Slice ? model.experts / experts.count : model.experts;
    o.first_expert = experts.kind == ExpertSplit::Slice ? experts.index * per : 0;
    o.experts_held = experts.kind == ExpertSplit::Dense ? 0 : per;
    o.experts = size_;
    for (int e = o.first_expert; e < o.first_expert + o.experts_held; ++e) {
      const std::string q = p + "experts." + std::to_string(e) + ".";
      add(q + "wgu", ParamRole::ExpertGu, b, 2 * fl, d, true, model.init_std, 2 * f, d, 2, f, j * fl);
      add(q + "wdown", ParamRole::ExpertDown, b, d, fl, true, out_std, d, f, 1, 0, 0, j * fl);
    }
  };
  if (experts.kind == ExpertSplit::Slice) {  // the experts of the layer's MoE blocks, nothing else
    for (int k = 0; k < spec.num_blocks; ++k) {
      const int b = spec.first_block + k;
      BlockOffsets o;
      o.block = b;
      o.moe = model.moe_block(b);
      if (o.moe) add_experts("blocks." + std::to_string(b) + ".", b, o);
      blocks_.push_back(o);
    }
    return;
  }
  if (spec.embedding) embedding_ = add("embedding", ParamRole::Embedding, -1, vl, d, true, model.init_std, v, d, 1, 0, j * vl);
  for (int k = 0; k < spec.num_blocks; ++k) {
    int b = spec.first_block + k;
    std::string p = "blocks." + std::to_string(b) + ".";
    BlockOffsets o;
    o.block = b;
    o.attn_norm = add(p + "attn_norm", ParamRole::AttnNorm, b, d, 1, false, 0, d, 1);
    o.wqkv = add(p + "wqkv", ParamRole::Wqkv, b, 3 * dl, d, true, model.init_std, 3 * d, d, 3, d, j * dl);
    o.wo = add(p + "wo", ParamRole::Wo, b, d, dl, true, out_std, d, d, 1, 0, 0, j * dl);
    o.ffn_norm = add(p + "ffn_norm", ParamRole::FfnNorm, b, d, 1, false, 0, d, 1);
    o.moe = model.moe_block(b);
    if (o.moe) {
      o.router = add(p + "router", ParamRole::Router, b, model.experts, d, true, model.init_std, model.experts, d);
      add_experts(p, b, o);
    } else {
      o.wgu = add(p + "wgu", ParamRole::Wgu, b, 2 * fl, d, true, model.init_std, 2 * f, d, 2, f, j * fl);
      o.wdown = add(p + "wdown", ParamRole::Wdown, b, d, fl, true, out_std, d, f, 1, 0, 0, j * fl);
    }
    blocks_.push_back(o);
  }
  if (spec.head) {
    final_norm_ = add("final_norm", ParamRole::FinalNorm, -1, d, 1, false, 0, d, 1);
    head_ = add("head", ParamRole::Head, -1, vl, d, true, model.init_std, v, d, 1, 0, j * vl);
  }
}

bool LayerLayout::has_moe() const {
  for (int k = 0; k < spec_.num_blocks; ++k)
    if (model_.moe_block(spec_.first_block + k)) return true;
  return false;
}

long ParamSpec::full_index(long e) const {
  const long r = e / cols, c = e % cols;
  const long per_block = rows / row_blocks;
  const long full_r = (r / per_block) * row_block_stride + row_start + r % per_block;
  return full_r * full_cols + col_start + c;
}

long shard_chunk(long size, int num_shards) { return (size + num_shards - 1) / num_shards; }

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

namespace {

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
  for (const ParamSpec& p : layout.params()) {  // (keyed by the element's index in the whole parameter: a TP
                                                 // slice holds exactly the whole model's values)
    long lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.size());
    if (lo >= hi) continue;
    std::uint64_t key = splitmix64(seed ^ fnv1a(p.name));
    for (long e = lo; e < hi; ++e)
      out[e - begin] = p.init_std == 0 ? 1.0f
                                       : static_cast<float>(p.init_std * normal(key, static_cast<std::uint64_t>(p.full_index(e - p.offset))));
  }
}

int floats_per_element(TensorKind kind) { return kind == TensorKind::OptState ? 2 : 1; }

}  // namespace trainsim::exec
