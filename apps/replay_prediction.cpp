#include "apps/replay_prediction.h"

#include "hardware/stage_layout.h"

namespace trainsim::apps {

hw::HardwareSetting replay_setting(const exec::ModelConfig& m, const std::string& device, const std::string& network,
                                   hw::Recompute recompute) {
  hw::HardwareSetting s;
  s.model = hw::model_preset("small");  // (the executor's model in fp32; its sizes set below)
  s.model.blocks = m.blocks, s.model.hidden = m.dim, s.model.heads = m.heads, s.model.kv_heads = m.heads;
  s.model.ffn = m.ffn, s.model.vocab = m.vocab, s.model.seq = m.seq;
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

}  // namespace trainsim::apps
