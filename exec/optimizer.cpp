#include "exec/optimizer.h"

#include <cmath>
#include <numbers>
#include <stdexcept>

#include <fmt/format.h>

namespace trainsim::exec {

void OptimizerConfig::validate() const {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (!(lr > 0) || !std::isfinite(lr)) bad(fmt::format("the learning rate must be positive, got {}", lr));
  if (!(min_lr >= 0) || min_lr > lr) bad(fmt::format("the minimum learning rate must be in [0, lr], got {}", min_lr));
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    bad(fmt::format("betas must be in [0, 1), got {} and {}", beta1, beta2));
  if (!(eps > 0)) bad(fmt::format("eps must be positive, got {}", eps));
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) bad(fmt::format("weight decay must be >= 0, got {}", weight_decay));
  if (!(grad_clip >= 0) || !std::isfinite(grad_clip)) bad(fmt::format("the gradient clip must be >= 0, got {}", grad_clip));
  if (warmup < -1) bad(fmt::format("warmup must be >= 0 (or -1 for steps/20), got {}", warmup));
}

float learning_rate(const OptimizerConfig& c, int step, int total) {
  int warmup = c.warmup >= 0 ? c.warmup : total / 20;
  if (step < warmup) return c.lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  int decay_steps = std::max(1, total - warmup);
  double progress = std::min(1.0, static_cast<double>(step - warmup) / decay_steps);
  double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return static_cast<float>(c.min_lr + coeff * (c.lr - c.min_lr));
}

AdamWStep adamw_step(const OptimizerConfig& c, int step, int total, bool decay) {
  AdamWStep s;
  s.lr = learning_rate(c, step, total);
  s.beta1 = c.beta1, s.beta2 = c.beta2, s.eps = c.eps;
  s.weight_decay = decay ? c.weight_decay : 0.0f;
  const int t = step + 1;
  s.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(c.beta1), t));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(c.beta2), t)));
  return s;
}

nlohmann::json to_json(const OptimizerConfig& c) {
  return nlohmann::json{{"lr", c.lr},       {"min_lr", c.min_lr}, {"warmup", c.warmup},
                        {"beta1", c.beta1}, {"beta2", c.beta2},   {"eps", c.eps},
                        {"weight_decay", c.weight_decay},         {"grad_clip", c.grad_clip}};
}

OptimizerConfig optimizer_from_json(const nlohmann::json& j) {
  OptimizerConfig c;
  try {
    c.lr = j.at("lr").get<float>();
    c.min_lr = j.at("min_lr").get<float>();
    c.warmup = j.at("warmup").get<int>();
    c.beta1 = j.at("beta1").get<float>();
    c.beta2 = j.at("beta2").get<float>();
    c.eps = j.at("eps").get<float>();
    c.weight_decay = j.at("weight_decay").get<float>();
    c.grad_clip = j.at("grad_clip").get<float>();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(fmt::format("optimizer configuration: {}", e.what()));
  }
  return c;
}

}  // namespace trainsim::exec
