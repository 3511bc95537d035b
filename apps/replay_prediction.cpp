#include "apps/replay_prediction.h"

#include <fmt/format.h>

#include "hardware/stage_layout.h"

namespace trainsim::apps {

hw::HardwareSetting replay_setting(const exec::ModelConfig& m, const std::string& device, const std::string& network,
                                   hw::Recompute recompute) {
  hw::HardwareSetting s;
  s.model = hw::model_preset("small");  // (the executor's model in fp32; its sizes set below)
  s.model.blocks = m.blocks, s.model.hidden = m.dim, s.model.heads = m.heads, s.model.kv_heads = m.heads;
  s.model.ffn = m.ffn, s.model.vocab = m.vocab, s.model.seq = m.seq;
  if (m.moe())  // (the executor's experts: routed SwiGLU experts of ffn columns each, no shared expert)
    s.model.experts = m.experts, s.model.top_k = m.top_k, s.model.expert_ffn = m.ffn, s.model.shared_experts = 0,
    s.model.dense_blocks = m.dense_blocks, s.model.capacity_factor = m.capacity_factor;
  s.model.validate("the replay's model");
  s.device = hw::load_device(device);
  s.network = hw::load_network(network);
  s.microbatch_size = m.microbatch_size;
  s.seq = m.seq;
  s.recompute = recompute;
  s.attention = hw::Attention::Eager;  // (the executor computes the s x s scores and keeps the probabilities)
  return s;
}

HardwareRun predict_replay(const Schedule& schedule, const hw::HardwareSetting& setting) {
  Schedule s = schedule;
  if (s.header.layout) hw::partition_layers(setting.model, s.header.layers, &*s.header.layout);
  s.header.cost_model = "hardware";
  s.header.hardware = setting;
  return simulate_hardware(s);
}

std::string prediction_miss_note(double predicted_s, double measured_s, const std::string& device) {
  if (!(predicted_s > 0) || !(measured_s > 0)) return "";
  const double ratio = measured_s / predicted_s;
  if (ratio <= kPredictionMissFactor && ratio >= 1 / kPredictionMissFactor) return "";
  const std::string why = device == "cpu"
                              ? "The cpu preset is fitted to replays of the small model on one idle 2-core Intel Xeon "
                                "with AVX-512 (hardware/device.cpp): another model, another CPU or a loaded machine "
                                "reads otherwise."
                              : fmt::format("Device {} describes another machine, or was fitted under another load.",
                                            device);
  return fmt::format("note: the measured step is {:.3g} x the predicted one. {} For this machine's own prediction, fit "
                     "a device to replays traced here (trainsim calibrate; docs/calibration.md) and give it with "
                     "--predict-device FILE.json.",
                     ratio, why);
}

}  // namespace trainsim::apps
