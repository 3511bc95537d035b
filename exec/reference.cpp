#include "exec/reference.h"

#include "exec/model.h"

namespace trainsim::exec {

ReferenceTrainer::ReferenceTrainer(const ModelConfig& model, const OptimizerConfig& optimizer, int total_steps,
                                   std::uint64_t seed, const TokenData& data, int microbatches, bool clip)
    : model_(model), opt_(optimizer), total_steps_(total_steps), microbatches_(microbatches), clip_(clip), data_(data),
      layout_(model, partition(model, 1).front()) {
  const long P = layout_.size();
  w_.resize(P), m_.assign(P, 0.0f), v_.assign(P, 0.0f), grad_.resize(P);
  init_parameters(layout_, seed, 0, P, w_.data());
  rope_tables(model_, cos_, sin_);
}

double ReferenceTrainer::step(int step) {
  ModelContext<float> c{&k_, &alloc_, cos_.data(), sin_.data()};
  const long P = layout_.size(), n = model_.tokens_per_microbatch();
  const double tokens = static_cast<double>(microbatches_) * n;
  std::vector<int> tokens_b(n), targets_b(n);
  std::vector<float> logits(n * model_.vocab), dW(P);
  double loss = 0;
  for (int b = 0; b < microbatches_; ++b) {
    data_.microbatch(model_, step, microbatches_, b, tokens_b.data(), targets_b.data());
    LayerStash stash;
    layer_forward(c, layout_, w_.data(), tokens_b.data(), model_.microbatch_size, logits.data(), &stash);
    double sum = 0;
    loss_forward_backward(c, model_, logits.data(), targets_b.data(), model_.microbatch_size,
                          static_cast<float>(1.0 / tokens), logits.data(), &sum);
    loss += sum;
    layer_backward_input(c, layout_, w_.data(), tokens_b.data(), logits.data(), static_cast<float*>(nullptr), stash);
    layer_backward_weight(c, layout_, tokens_b.data(), logits.data(), dW.data(), stash);
    if (b == 0) grad_ = dW;
    else k_.add(grad_.data(), dW.data(), grad_.data(), P);
  }
  double norm_sq = 0;
  k_.sum_squares(grad_.data(), P, &norm_sq);
  for (const ParamSpec& p : layout_.params()) {
    AdamWStep st = adamw_step(opt_, step, total_steps_, p.decay);
    float* w = w_.data() + p.offset;
    k_.adamw(w, grad_.data() + p.offset, m_.data() + p.offset, v_.data() + p.offset, w, m_.data() + p.offset,
             v_.data() + p.offset, p.size(), st, clip_ ? &norm_sq : nullptr, opt_.grad_clip);
  }
  return loss / tokens;
}

std::map<std::string, std::vector<float>> ReferenceTrainer::parameters() const {
  std::map<std::string, std::vector<float>> out;
  for (const ParamSpec& p : layout_.params()) out[p.name].assign(w_.begin() + p.offset, w_.begin() + p.offset + p.size());
  return out;
}

}  // namespace trainsim::exec
