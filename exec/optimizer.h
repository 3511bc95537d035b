// The optimizer of the executor and of the single-device reference: AdamW (torch.optim.AdamW's arithmetic,
// exec/math.h), weight decay on matrices only, a learning rate with linear warmup and cosine decay
// (nanoGPT's get_lr), and clipping by the global gradient norm (torch.nn.utils.clip_grad_norm_).
#pragma once

#include <nlohmann/json.hpp>

#include "exec/math.h"

namespace trainsim::exec {

/// Hyperparameters. Fields are plain so a command line can set them.
struct OptimizerConfig {
  float lr = 1e-3f;            ///< peak learning rate
  float min_lr = 1e-4f;        ///< learning rate at the end of the cosine decay
  int warmup = -1;             ///< warmup steps; -1: steps / 20
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;   ///< applied to matrices (embedding, projections, head), not to norm gains
  float grad_clip = 1.0f;      ///< max global grad norm; 0 turns clipping off

  /// Throws std::invalid_argument naming a bad field (negative rate, beta outside [0, 1), ...).
  void validate() const;
  friend bool operator==(const OptimizerConfig&, const OptimizerConfig&) = default;
};

/// Learning rate of 0-based step `step` of `total` steps: lr·(step+1)/warmup during warmup, then cosine
/// decay from lr to min_lr over the remaining steps.
float learning_rate(const OptimizerConfig& c, int step, int total);
/// The constants of AdamW at 0-based step `step` of `total`, for a parameter with or without decay.
AdamWStep adamw_step(const OptimizerConfig& c, int step, int total, bool decay);

nlohmann::json to_json(const OptimizerConfig& c);
/// Throws std::invalid_argument for a missing or mistyped field.
OptimizerConfig optimizer_from_json(const nlohmann::json& j);

}  // namespace trainsim::exec
