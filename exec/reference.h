// Plain single-device training, the executor's reference (DESIGN §5 "Correctness"): one model, every
// microbatch of a step as gradient accumulation, summed in microbatch order, then the same clipping and AdamW.
// It shares the model's arithmetic (exec/model.h) and nothing of the replay: no schedule, no streams, no
// communicator, no sharding. Replays of any schedule must match it (fp32: within 1e-5 relative).
// The microbatches of a step are independent until their gradients are summed: they run on up to `threads` CPU
// threads at once, each with its own kernels and memory, and their gradients and losses are then added in
// microbatch order, so the result has the same bits whatever the thread count (a GEMM's bits depend on its call
// alone: exec/cpu/cpu_gemm.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec/buffer.h"
#include "exec/cpu/cpu_kernels.h"
#include "exec/data.h"
#include "exec/layout.h"
#include "exec/moe.h"
#include "exec/optimizer.h"

namespace trainsim::exec {

class ReferenceTrainer {
 public:
  /// A fresh model from `seed`. `microbatches` per step; `clip`: clip by the global norm (the
  /// optimizer's grad_clip) or not. `threads`: how many microbatches run at once (at least 1; 0: one per core
  /// of the machine, std::thread::hardware_concurrency()), fewer where the gradients in flight beyond the first
  /// would pass 2 GiB; each in flight holds one gradient (the model's size in fp32) and one microbatch's
  /// activations.
  ReferenceTrainer(const ModelConfig& model, const OptimizerConfig& optimizer, int total_steps, std::uint64_t seed,
                   const TokenData& data, int microbatches, bool clip, int threads = 0);
  ~ReferenceTrainer();
  /// Runs 0-based step `step`; returns its loss (the mean over every token of every microbatch). Rethrows the
  /// first exception of a microbatch's thread after every thread has finished.
  double step(int step);
  /// The last step's MoE load-balancing loss (ModelConfig::aux_loss_coeff), as StepReport::aux_loss; 0 without it.
  double aux_loss() const { return aux_loss_; }
  /// The parameters by global name (exec/layout.h), row-major.
  std::map<std::string, std::vector<float>> parameters() const;
  /// Mixture of Experts: the last step's routing, (MoE block, microbatch) -> its digest with the tokens' margins
  /// (exec/moe.h), when record_routing(true) was set; empty for a dense model.
  void record_routing(bool on) { record_routing_ = on; }
  const std::map<std::pair<int, int>, RoutingDigest>& routing() const { return routing_; }

 private:
  ModelConfig model_;
  OptimizerConfig opt_;
  int total_steps_, microbatches_;
  bool clip_;
  const TokenData& data_;
  LayerLayout layout_;
  CpuKernels<float> k_;
  std::vector<float> w_, m_, v_, grad_, cos_, sin_;
  struct Lane;                               // what one microbatch in flight holds (reference.cpp)
  std::vector<std::unique_ptr<Lane>> lanes_;  // one per microbatch that may run at once
  bool record_routing_ = false;
  std::map<std::pair<int, int>, RoutingDigest> routing_;
  double aux_loss_ = 0;
};

}  // namespace trainsim::exec
