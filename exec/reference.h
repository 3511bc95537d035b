// Plain single-device training, the executor's reference (DESIGN §5 "Correctness"): one model, one CPU
// thread, every microbatch of a step in order as gradient accumulation, then the same clipping and AdamW.
// It shares the model's arithmetic (exec/model.h) and nothing of the replay: no schedule, no streams, no
// communicator, no sharding. Replays of any schedule must match it (fp32: within 1e-5 relative).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "exec/buffer.h"
#include "exec/cpu/cpu_kernels.h"
#include "exec/data.h"
#include "exec/layout.h"
#include "exec/optimizer.h"

namespace trainsim::exec {

class ReferenceTrainer {
 public:
  /// A fresh model from `seed`. `microbatches` per step; `clip`: clip by the global norm (the
  /// optimizer's grad_clip) or not.
  ReferenceTrainer(const ModelConfig& model, const OptimizerConfig& optimizer, int total_steps, std::uint64_t seed,
                   const TokenData& data, int microbatches, bool clip);
  /// Runs 0-based step `step`; returns its loss (the mean over every token of every microbatch).
  double step(int step);
  /// The parameters by global name (exec/layout.h), row-major.
  std::map<std::string, std::vector<float>> parameters() const;

 private:
  ModelConfig model_;
  OptimizerConfig opt_;
  int total_steps_, microbatches_;
  bool clip_;
  const TokenData& data_;
  LayerLayout layout_;
  HostAllocator alloc_;
  CpuKernels<float> k_;
  std::vector<float> w_, m_, v_, grad_, cos_, sin_;
};

}  // namespace trainsim::exec
