#include "exec/reference.h"

#include <algorithm>
#include <future>
#include <system_error>
#include <thread>

#include "exec/model.h"

namespace trainsim::exec {

// One microbatch in flight: its own kernels and memory (neither is shared between threads), its inputs, its
// logits (overwritten by their gradient), its weight gradient and its loss sum.
struct ReferenceTrainer::Lane {
  HostAllocator alloc;
  CpuKernels<float> k;
  std::vector<int> tokens, targets;
  std::vector<float> logits, dW;
  double loss_sum = 0, aux_sum = 0;
  std::map<std::pair<int, int>, RoutingDigest> routes;  // (MoE block, microbatch) -> its routing
};

ReferenceTrainer::ReferenceTrainer(const ModelConfig& model, const OptimizerConfig& optimizer, int total_steps,
                                   std::uint64_t seed, const TokenData& data, int microbatches, bool clip, int threads)
    : model_(model), opt_(optimizer), total_steps_(total_steps), microbatches_(microbatches), clip_(clip), data_(data),
      layout_(model, partition(model, 1).front()) {
  const long P = layout_.size();
  w_.resize(P), m_.assign(P, 0.0f), v_.assign(P, 0.0f), grad_.resize(P);
  init_parameters(layout_, seed, 0, P, w_.data());
  rope_tables(model_, cos_, sin_);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // (the gradients in flight beyond the first kept under 2 GiB: a large model on a many-core machine runs fewer at
  // once rather than holding one gradient per core)
  const long by_memory = 1 + (2L << 30) / (P * static_cast<long>(sizeof(float)));
  const long most = std::min({static_cast<long>(threads), static_cast<long>(microbatches_), by_memory});
  const int lanes = static_cast<int>(std::max(1L, most));
  const long n = model_.tokens_per_microbatch();
  for (int i = 0; i < lanes; ++i) {
    auto lane = std::make_unique<Lane>();
    lane->tokens.resize(n), lane->targets.resize(n);
    lane->logits.resize(static_cast<std::size_t>(n) * model_.vocab), lane->dW.resize(P);
    lanes_.push_back(std::move(lane));
  }
}

ReferenceTrainer::~ReferenceTrainer() = default;

double ReferenceTrainer::step(int step) {
  const long P = layout_.size(), n = model_.tokens_per_microbatch();
  const double tokens = static_cast<double>(microbatches_) * n;
  // Microbatch b's forward, loss and backward on `lane`: reads the weights, writes only the lane.
  auto run = [&](Lane& lane, int b) {
    ModelContext<float> c{.k = &lane.k, .alloc = &lane.alloc, .rope_cos = cos_.data(), .rope_sin = sin_.data(),
                          .microbatch_weight = 1.0 / microbatches_, .aux_loss_sum = &lane.aux_sum};
    lane.aux_sum = 0;
    if (record_routing_)
      c.on_route = [&lane, b, n](int block, const MoeRouting& r) { lane.routes[{block, b}] = routing_digest(r, 0, n); };
    data_.microbatch(model_, step, microbatches_, b, lane.tokens.data(), lane.targets.data());
    LayerStash stash;
    layer_forward(c, layout_, w_.data(), lane.tokens.data(), model_.microbatch_size, lane.logits.data(), &stash);
    lane.loss_sum = 0;
    loss_forward_backward(c, model_, lane.logits.data(), lane.targets.data(), model_.microbatch_size,
                          static_cast<float>(1.0 / tokens), lane.logits.data(), &lane.loss_sum);
    layer_backward(c, layout_, w_.data(), lane.tokens.data(), lane.logits.data(), static_cast<float*>(nullptr),
                   lane.dW.data(), stash);
  };
  double loss = 0;
  aux_loss_ = 0;
  routing_.clear();
  const int width = static_cast<int>(lanes_.size());
  for (int b0 = 0; b0 < microbatches_; b0 += width) {
    const int count = std::min(width, microbatches_ - b0);
    {
      // Lanes 1.. on threads of their own (their futures' destructors wait: no thread outlives this block); a
      // lane whose thread cannot start runs here after lane 0, so a machine out of threads only runs slower.
      std::vector<std::future<void>> others;
      int started = 1;
      for (; started < count; ++started) {
        try {
          others.push_back(std::async(std::launch::async, run, std::ref(*lanes_[started]), b0 + started));
        } catch (const std::system_error&) {
          break;
        }
      }
      std::exception_ptr first;
      try {
        run(*lanes_[0], b0);
        for (int i = started; i < count; ++i) run(*lanes_[i], b0 + i);
      } catch (...) {
        first = std::current_exception();
      }
      for (auto& f : others) {
        try {
          f.get();
        } catch (...) {
          if (!first) first = std::current_exception();
        }
      }
      if (first) std::rethrow_exception(first);
    }
    // the sums in microbatch order, as one thread would add them
    for (int i = 0; i < count; ++i) {
      Lane& lane = *lanes_[i];
      loss += lane.loss_sum;
      aux_loss_ += lane.aux_sum;
      routing_.merge(lane.routes);
      lane.routes.clear();
      if (b0 + i == 0) grad_ = lane.dW;
      else k_.add(grad_.data(), lane.dW.data(), grad_.data(), P);
    }
  }
  double norm_sq = 0;
  k_.sum_squares(grad_.data(), P, &norm_sq);
  for (const ParamSpec& p : layout_.params()) {
    AdamWStep st = adamw_step(opt_, step, total_steps_, p.decay);
    float* w = w_.data() + p.offset;
    k_.adamw(w, grad_.data() + p.offset, m_.data() + p.offset, v_.data() + p.offset, w, m_.data() + p.offset,
             v_.data() + p.offset, p.size(), st, clip_ ? &norm_sq : nullptr, opt_.grad_clip);
  }
  aux_loss_ /= microbatches_;
  return loss / tokens;
}

std::map<std::string, std::vector<float>> ReferenceTrainer::parameters() const {
  std::map<std::string, std::vector<float>> out;
  for (const ParamSpec& p : layout_.params()) out[p.name].assign(w_.begin() + p.offset, w_.begin() + p.offset + p.size());
  return out;
}

}  // namespace trainsim::exec
