#include "schedules/calibration.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hardware/comm.h"
#include "hardware/memory.h"
#include "schedules/text_format.h"

namespace trainsim {

namespace {

struct Sample {
  OpKind kind;
  hw::Work work;
  double seconds;
};

struct CommSample {
  double steps = 0;  // latency multiplier
  double bytes = 0;  // bytes over the bandwidth
  double seconds = 0;
};

// Least squares y = a + b·x with a, b >= 0 (a = 0 when `intercept` is false).
std::pair<double, double> fit_line(const std::vector<double>& x, const std::vector<double>& y, bool intercept) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  if (intercept && n >= 2) {
    double den = n * sxx - sx * sx;
    if (den > 0) {
      double b = (n * sxy - sx * sy) / den, a = (sy - b * sx) / n;
      if (a >= 0 && b > 0) return {a, b};
    }
  }
  return {0.0, sxx > 0 ? std::max(sxy / sxx, 0.0) : 0.0};
}

// Least squares y = p·u + q·v (two columns, no intercept), both >= 0.
std::pair<double, double> fit_two(const std::vector<double>& u, const std::vector<double>& v, const std::vector<double>& y) {
  double uu = 0, vv = 0, uv = 0, uy = 0, vy = 0;
  for (std::size_t i = 0; i < y.size(); ++i)
    uu += u[i] * u[i], vv += v[i] * v[i], uv += u[i] * v[i], uy += u[i] * y[i], vy += v[i] * y[i];
  double den = uu * vv - uv * uv;
  if (den > 0) {
    double p = (uy * vv - vy * uv) / den, q = (vy * uu - uy * uv) / den;
    if (p >= 0 && q > 0) return {p, q};
  }
  return {0.0, vv > 0 ? std::max(vy / vv, 0.0) : 0.0};  // latency 0, bandwidth only
}

nlohmann::json read_trace(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument(fmt::format("{}: cannot open the trace", path));
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw std::invalid_argument(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
}

// The shards an update works on: its optimizer state's, from the reads ("O0[0/2]").
double shard_fraction(const nlohmann::json& args) {
  if (!args.contains("reads") || !args["reads"].is_array()) return 1;
  for (const auto& r : args["reads"]) {
    if (!r.is_string()) continue;
    try {
      Tensor t = parse_tensor(r.get<std::string>());
      if (t.kind == TensorKind::OptState) return static_cast<double>(t.shards.size()) / t.num_shards;
    } catch (const std::invalid_argument&) {
    }
  }
  return 1;
}

int batch_count(const std::string& text) {
  if (text.empty()) return 0;
  int n = 0;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    auto dash = part.find('-');
    if (dash == std::string::npos) ++n;
    else n += std::stoi(part.substr(dash + 1)) - std::stoi(part.substr(0, dash)) + 1;
  }
  return n;
}

}  // namespace

Calibration calibrate(const std::vector<std::string>& files, const hw::HardwareSetting& base) {
  if (files.empty()) throw std::invalid_argument("calibrate: no trace given");
  std::vector<Sample> samples;
  std::vector<CommSample> comm;
  for (const std::string& path : files) {
    nlohmann::json j = read_trace(path);
    if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array() || !j.contains("otherData"))
      throw std::invalid_argument(fmt::format("{}: not a trainsim trace (no traceEvents and otherData)", path));
    const auto& other = j["otherData"];
    if (!other.contains("layers") || !other["layers"].is_number_integer())
      throw std::invalid_argument(fmt::format("{}: field 'otherData.layers': expected an integer", path));
    const int layers = other["layers"].get<int>();
    std::vector<hw::LayerContent> content;
    hw::TensorSizes sizes(base, layers);  // throws SpecError when the model has too few blocks
    content = sizes.layers();
    // Collective calls: (group, k-th call on each member) -> durations.
    std::map<std::pair<int, int>, std::vector<double>> calls;
    std::map<std::pair<int, int>, CommSample> call_shape;
    std::map<std::pair<int, int>, int> next_call;  // (pid, group) -> count
    for (const auto& e : j["traceEvents"]) {
      if (!e.is_object() || e.value("ph", "") != "X") continue;
      const std::string name = e.value("name", "");
      const double seconds = e.value("dur", 0.0) * 1e-6;
      const auto& args = e.contains("args") ? e["args"] : nlohmann::json::object();
      std::string kind_name = name.substr(0, name.find(' '));
      auto kind = op_kind_from_name(kind_name);
      if (!kind) continue;
      int layer = -1;
      if (auto at = name.find(" L"); at != std::string::npos) layer = std::stoi(name.substr(at + 2));
      if (is_compute(*kind)) {
        if (*kind == OpKind::Loss) layer = layers - 1;
        if (layer < 0 || layer >= layers) continue;
        int batches = batch_count(args.value("batches", std::string()));
        double params = *kind == OpKind::Update ? sizes.layer_parameters(layer) * shard_fraction(args) : 0;
        samples.push_back({*kind, hw::compute_work(base, content[layer], *kind, batches, params), seconds});
      } else if (*kind == OpKind::Send && args.contains("reads") && args["reads"].is_array() && !args["reads"].empty()) {
        Tensor t = parse_tensor(args["reads"][0].get<std::string>());
        comm.push_back({1, sizes.wire_bytes(t), seconds});
      } else if (is_collective(*kind) && *kind != OpKind::Barrier) {
        const int group = args.value("group", 0), pid = e.value("pid", 0);
        const int k = next_call[{pid, group}]++;
        calls[{group, k}].push_back(seconds);
        double bytes = 0;
        const char* key = *kind == OpKind::AllGather ? "writes" : "reads";
        if (args.contains(key) && args[key].is_array() && !args[key].empty())
          bytes = sizes.wire_bytes(parse_tensor(args[key][0].get<std::string>()));
        call_shape[{group, k}] = {0, bytes, static_cast<double>(*kind == OpKind::AllReduce ? 2 : 1)};
      }
    }
    for (auto& [key, durations] : calls) {
      const int n = static_cast<int>(durations.size());
      if (n < 2) continue;
      const double mult = call_shape[key].seconds;  // 2 for all-reduce
      comm.push_back({mult * (n - 1), mult * (n - 1.0) / n * call_shape[key].bytes,
                      *std::min_element(durations.begin(), durations.end())});
    }
  }
  if (samples.empty()) throw std::invalid_argument(fmt::format("calibrate: no compute op in {}", files.front()));

  Calibration c;
  c.device = base.device;
  c.network = base.network;
  c.traces = files;
  c.compute_ops = static_cast<int>(samples.size());
  hw::EfficiencyTable& e = c.device.efficiency;
  const double peak = c.device.peak_flops, bw = c.device.hbm_bandwidth;
  // 1. Memory-bound ops.
  std::vector<double> x, y;
  for (const Sample& s : samples)
    if (s.kind == OpKind::Update || s.kind == OpKind::Loss) x.push_back(s.work.bytes), y.push_back(s.seconds);
  if (!x.empty()) {
    bool distinct = std::any_of(x.begin(), x.end(), [&](double v) { return std::fabs(v - x.front()) > 1e-9 * x.front(); });
    auto [overhead, per_byte] = fit_line(x, y, distinct);
    e.op_overhead_s = overhead;
    if (per_byte > 0) e.memory = std::clamp(1.0 / (per_byte * bw), 1e-6, 1.0);
  }
  const double per_byte = 1.0 / (bw * e.memory);
  // 2., 3. Matrix multiplies per pass: efficiency = FLOPs / (peak x the time they leave).
  auto fit_pass = [&](auto flops_of, auto other_of, auto use) {
    double flops = 0, time = 0;
    for (const Sample& s : samples) {
      if (!use(s.kind)) continue;
      flops += flops_of(s.work);
      time += std::max(s.seconds - s.work.bytes * per_byte - e.op_overhead_s - other_of(s.work), 0.0);
    }
    return flops > 0 && time > 0 ? std::clamp(flops / (peak * time), 1e-6, 1.0) : 0.0;
  };
  double fwd = fit_pass([](const hw::Work& w) { return w.forward_flops + w.attention_flops; },
                        [](const hw::Work&) { return 0.0; }, [](OpKind k) { return k == OpKind::Forward; });
  if (fwd > 0) e.forward = e.attention = fwd;
  auto attention_time = [&](const hw::Work& w) { return w.attention_flops / (peak * e.attention) + w.forward_flops / (peak * e.forward); };
  double bi = fit_pass([](const hw::Work& w) { return w.backward_input_flops; }, attention_time,
                       [](OpKind k) { return k == OpKind::BackwardInput; });
  double bwt = fit_pass([](const hw::Work& w) { return w.backward_weight_flops; }, attention_time,
                        [](OpKind k) { return k == OpKind::BackwardWeight; });
  double full = fit_pass([](const hw::Work& w) { return w.backward_input_flops + w.backward_weight_flops; },
                         attention_time, [](OpKind k) { return k == OpKind::Backward; });
  e.backward_input = bi > 0 ? bi : full > 0 ? full : e.backward_input;
  e.backward_weight = bwt > 0 ? bwt : full > 0 ? full : e.backward_weight;
  // 4. Communication.
  if (!comm.empty()) {
    std::vector<double> u, v, t;
    for (const CommSample& s : comm) u.push_back(s.steps), v.push_back(s.bytes), t.push_back(s.seconds);
    auto [latency, per_comm_byte] = fit_two(u, v, t);
    if (per_comm_byte > 0) {
      c.network.intra_latency_s = c.network.inter_latency_s = latency;
      c.network.intra_bandwidth = c.network.inter_bandwidth = 1.0 / per_comm_byte;
      c.network_fitted = true;
    }
    c.comm_ops = static_cast<int>(comm.size());
  }
  c.device.validate("calibrate");
  return c;
}

}  // namespace trainsim
