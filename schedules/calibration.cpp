#include "schedules/calibration.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "hardware/comm.h"
#include "hardware/memory.h"
#include "schedules/measured_trace.h"
#include "schedules/op_gaps.h"
#include "schedules/text_format.h"

namespace trainsim {

namespace {

// A measured efficiency is what a run sustained: the base device's sustained fraction goes into its FLOP
// efficiencies (those the measurement does not replace keep their product) and the fitted device sustains 1.
void fold_sustained(hw::EfficiencyTable& e) {
  e.forward *= e.sustained, e.backward_input *= e.sustained, e.backward_weight *= e.sustained;
  e.attention *= e.sustained, e.fp8 *= e.sustained;
  e.sustained = 1;
}

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

// The shards an update works on: its optimizer state's, from the reads ("O0[0/2]").
double shard_fraction(const std::vector<std::string>& reads) {
  for (const std::string& r : reads) {
    try {
      Tensor t = parse_tensor(r);
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

// The same op in every traced step of one trace: rank and position in the rank's step.
using OpKey = std::pair<int, std::size_t>;

// What one trace contributes: per-op medians over its steps.
struct TraceSamples {
  std::vector<Sample> compute;
  std::vector<CommSample> comm;
  std::vector<double> gaps;  // per op: the median of its dispatch gaps over the steps
  int steps = 0;
};

TraceSamples trace_samples(const MeasuredTrace& t, const hw::HardwareSetting& base) {
  hw::TensorSizes sizes(base, t.layers);  // throws SpecError when the model has too few blocks
  const std::vector<hw::LayerContent> content = sizes.layers();
  const int layers = t.layers;
  std::map<OpKey, const MeasuredOp*> first_seen;
  std::map<OpKey, std::vector<double>> durations, gaps;
  std::map<std::pair<int, int>, std::vector<double>> call_times;  // (group, k-th call) -> per step: shortest member
  struct CallShape {
    double multiplier = 1;  // 2 for an all-reduce (reduce-scatter + all-gather)
    double bytes = 0;       // the tensor the ring formulas take
    int members = 0;        // members that recorded the call
    bool rooted = false;    // broadcast, reduce: (n-1)·alpha + S/B (hardware/comm.h)
  };
  std::map<std::pair<int, int>, CallShape> call_shape;
  auto same_op = [](const MeasuredOp& a, const MeasuredOp& b) {
    return a.kind == b.kind && a.layer == b.layer && a.batches == b.batches && a.peer == b.peer && a.group == b.group;
  };
  for (const MeasuredStep& step : t.steps) {
    const auto step_gaps = dispatch_gaps(step);
    std::map<std::pair<int, int>, std::vector<double>> calls;  // this step's (group, k) -> member durations
    for (std::size_t r = 0; r < step.ranks.size(); ++r) {
      std::map<int, int> next_call;  // group -> calls seen on this rank
      for (std::size_t i = 0; i < step.ranks[r].size(); ++i) {
        const MeasuredOp& op = step.ranks[r][i];
        const OpKey key{static_cast<int>(r), i};
        auto [it, fresh] = first_seen.emplace(key, &op);
        if (!fresh && !same_op(*it->second, op)) continue;  // not the same op list in every step
        durations[key].push_back(op.seconds());
        if (step_gaps[r][i] == step_gaps[r][i]) gaps[key].push_back(step_gaps[r][i]);
        if (is_collective(op.kind) && op.kind != OpKind::Barrier) {
          const std::pair<int, int> call{op.group, next_call[op.group]++};
          calls[call].push_back(op.seconds());
          if (!call_shape.count(call)) {
            double bytes = 0;
            const auto& names = op.kind == OpKind::AllGather || (op.kind == OpKind::Broadcast && op.reads.empty())
                                    ? op.writes
                                    : op.reads;
            if (!names.empty()) bytes = sizes.wire_bytes(parse_tensor(names.front()));
            call_shape[call] = {static_cast<double>(op.kind == OpKind::AllReduce ? 2 : 1), bytes, 0, is_rooted(op.kind)};
          }
        }
      }
    }
    for (auto& [call, members] : calls) {
      if (members.size() < 2) continue;
      call_times[call].push_back(*std::min_element(members.begin(), members.end()));
      call_shape[call].members = std::max(call_shape[call].members, static_cast<int>(members.size()));
    }
  }
  TraceSamples out;
  out.steps = static_cast<int>(t.steps.size());
  for (const auto& [key, op_ptr] : first_seen) {
    const MeasuredOp& op = *op_ptr;
    const double seconds = median(durations[key]);
    if (auto g = gaps.find(key); g != gaps.end() && !g->second.empty()) out.gaps.push_back(median(g->second));
    if (is_compute(op.kind)) {
      const int layer = op.kind == OpKind::Loss ? layers - 1 : op.layer;
      if (layer < 0 || layer >= layers) continue;
      const int batches = batch_count(op.batches);
      const double params = op.kind == OpKind::Update ? sizes.layer_parameters(layer) * shard_fraction(op.reads) : 0;
      out.compute.push_back({op.kind, hw::compute_work(base, content[layer], op.kind, batches, params), seconds});
    } else if (op.kind == OpKind::Send && !op.reads.empty()) {
      out.comm.push_back({1, sizes.wire_bytes(parse_tensor(op.reads.front())), seconds});
    }
  }
  for (const auto& [call, times] : call_times) {
    const CallShape& c = call_shape[call];
    const double n = c.members;
    out.comm.push_back({c.multiplier * (n - 1), c.rooted ? c.bytes : c.multiplier * (n - 1) / n * c.bytes, median(times)});
  }
  return out;
}

// What makes two traces traces of the same schedule: the layers and every rank's op list (kind, layer,
// batches, peer, group of each op) in their first step.
std::string op_list(const MeasuredTrace& t) {
  std::string out = std::to_string(t.layers);
  if (t.steps.empty()) return out;
  for (const auto& rank : t.steps.front().ranks) {
    out += '|';
    for (const MeasuredOp& op : rank)
      out += fmt::format("{} {} {} {} {};", op_name(op.kind), op.layer, op.batches, op.peer, op.group);
  }
  return out;
}

}  // namespace

Calibration calibrate(const std::vector<std::string>& files, const hw::HardwareSetting& base) {
  if (files.empty()) throw std::invalid_argument("calibrate: no trace given");
  std::vector<Sample> samples;
  std::vector<CommSample> comm;
  std::vector<double> gaps;
  int steps = 0;
  // Traces of the same schedule (replays repeated to spread a shared machine's load over them) pool their
  // steps: each op's median is over all of them. Groups in the order of their first trace.
  std::vector<MeasuredTrace> groups;
  std::map<std::string, std::size_t> group_of;
  for (const std::string& path : files) {
    MeasuredTrace t = read_measured_trace(path);
    // The model the replay trained, where the trace says it: another than --model's would fit the table to the
    // wrong FLOPs and bytes (issue 38: a tiny trace calibrated as small exited 0).
    if (t.model.is_object()) {
      const hw::ModelSpec& m = base.model;
      auto field = [&](const char* k) { return t.model.contains(k) && t.model[k].is_number_integer() ? t.model[k].get<long long>() : -1; };
      if (field("blocks") != m.blocks || field("dim") != m.hidden || field("heads") != m.heads || field("vocab") != m.vocab)
        throw std::invalid_argument(fmt::format(
            "{}: the replay trained model '{}' ({} blocks, dim {}, {} heads, vocabulary {}), not --model's '{}' ({} "
            "blocks, dim {}, {} heads, vocabulary {}): give the model it trained",
            path, t.model.value("preset", std::string("?")), field("blocks"), field("dim"), field("heads"),
            field("vocab"), m.preset, m.blocks, m.hidden, m.heads, m.vocab));
    }
    auto [it, fresh] = group_of.emplace(op_list(t), groups.size());
    if (fresh) groups.push_back(std::move(t));
    else for (MeasuredStep& st : t.steps) groups[it->second].steps.push_back(std::move(st));
  }
  for (const MeasuredTrace& t : groups) {
    TraceSamples ts;
    try {
      ts = trace_samples(t, base);
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      throw std::invalid_argument(what.rfind(t.path, 0) == 0 ? what : fmt::format("{}: {}", t.path, what));
    }
    samples.insert(samples.end(), ts.compute.begin(), ts.compute.end());
    comm.insert(comm.end(), ts.comm.begin(), ts.comm.end());
    gaps.insert(gaps.end(), ts.gaps.begin(), ts.gaps.end());
    steps += ts.steps;
  }
  if (samples.empty()) throw std::invalid_argument(fmt::format("calibrate: no compute op in {}", files.front()));

  Calibration c;
  c.device = base.device;
  c.network = base.network;
  c.traces = files;
  c.compute_ops = static_cast<int>(samples.size());
  c.device.fitted_to = "calibrate";
  hw::EfficiencyTable& e = c.device.efficiency;
  fold_sustained(e);
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
  // Each op's FLOPs as the device's kernel tables weigh them (hardware/op_costs.h, Work::*_weighted: a GEMM's FLOPs
  // over its shape factor; equal to the FLOPs on a device without tables), so that the fitted efficiencies are
  // those at the best shape: the same table the cost model reads.
  double fwd = fit_pass([](const hw::Work& w) { return w.forward_weighted + w.attention_forward_weighted; },
                        [](const hw::Work&) { return 0.0; }, [](OpKind k) { return k == OpKind::Forward; });
  if (fwd > 0) e.forward = e.attention = fwd;
  auto attention_time = [&](const hw::Work& w) {
    return (w.attention_forward_weighted + w.attention_backward_weighted) / (peak * e.attention) +
           w.forward_weighted / (peak * e.forward);
  };
  double bi = fit_pass([](const hw::Work& w) { return w.backward_input_weighted; }, attention_time,
                       [](OpKind k) { return k == OpKind::BackwardInput; });
  double bwt = fit_pass([](const hw::Work& w) { return w.backward_weight_weighted; }, attention_time,
                        [](OpKind k) { return k == OpKind::BackwardWeight; });
  double full = fit_pass([](const hw::Work& w) { return w.backward_input_weighted + w.backward_weight_weighted; },
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
  // 5. Dispatch: least squares of one constant over the ops' median gaps, i.e. their mean (the sum of the gaps
  // on a path is what the step pays, so the mean, not the median, of the per-op values).
  if (!gaps.empty()) {
    double sum = 0;
    for (double g : gaps) sum += g;
    e.dispatch_s = sum / static_cast<double>(gaps.size());
  }
  c.gap_ops = static_cast<int>(gaps.size());
  c.steps = steps;
  c.device.validate("calibrate");
  return c;
}

hw::DeviceSpec fit_device(const std::vector<MeasuredWork>& work, const hw::DeviceSpec& base, double* floor_s) {
  hw::DeviceSpec d = base;
  d.fitted_to = "calibrate";
  hw::EfficiencyTable& e = d.efficiency;
  fold_sustained(e);
  using C = MeasuredWork::Class;
  // Memory-bound kernels: time = bytes / (bandwidth x memory) + a floor per kernel (kept apart: op_overhead_s
  // is per schedule op, a whole layer's kernels).
  std::vector<double> x, y;
  for (const MeasuredWork& w : work)
    if (w.cls == C::MemoryBound && w.bytes > 0) x.push_back(w.bytes), y.push_back(w.seconds);
  double floor = 0;
  if (!x.empty()) {
    const bool distinct = std::any_of(x.begin(), x.end(), [&](double v) { return std::fabs(v - x.front()) > 1e-9 * x.front(); });
    auto [intercept, per_byte] = fit_line(x, y, distinct);
    floor = intercept;
    if (per_byte > 0) e.memory = std::clamp(1.0 / (per_byte * d.hbm_bandwidth), 1e-6, 1.0);
  }
  if (floor_s) *floor_s = floor;
  // GEMMs and attention: their FLOPs over peak x their time (kernels that take far longer than the floor).
  auto efficiency = [&](C cls) {
    double flops = 0, time = 0;
    for (const MeasuredWork& w : work)
      if (w.cls == cls && w.flops > 0) flops += w.flops, time += w.seconds;
    return flops > 0 && time > 0 ? std::clamp(flops / (d.peak_flops * time), 1e-6, 1.0) : 0.0;
  };
  if (const double f = efficiency(C::ForwardGemm); f > 0) e.forward = f;
  if (const double b = efficiency(C::BackwardGemm); b > 0) e.backward_input = e.backward_weight = b;
  if (const double a = efficiency(C::Attention); a > 0) e.attention = a;
  d.validate("calibrate");
  return d;
}

hw::NetworkSpec fit_network(const std::vector<MeasuredComm>& comm, const hw::NetworkSpec& base, bool* fitted) {
  hw::NetworkSpec n = base;
  bool any = false;
  for (const bool inter : {false, true}) {
    // T = steps x alpha + bytes / B, with the steps and the bytes each formula of hardware/comm.h charges.
    std::vector<double> u, v, t;
    for (const MeasuredComm& c : comm) {
      if (c.inter_node != inter) continue;
      const double r = c.ranks;
      double steps = 1, bytes = c.bytes;
      if (!c.p2p) {
        switch (c.collective) {
          case hw::Collective::AllReduce: steps = 2 * (r - 1), bytes = 2 * (r - 1) / r * c.bytes; break;
          case hw::Collective::AllGather:
          case hw::Collective::ReduceScatter: steps = r - 1, bytes = (r - 1) / r * c.bytes; break;
          case hw::Collective::Broadcast:
          case hw::Collective::Reduce: steps = r - 1; break;
        }
      }
      u.push_back(steps), v.push_back(bytes), t.push_back(c.seconds);
    }
    if (t.empty()) continue;
    auto [latency, per_byte] = fit_two(u, v, t);
    if (per_byte <= 0) continue;
    // A fit no link has (issue 38: tiny durations gave an infinite bandwidth that the file wrote as null, huge ones
    // 5.5e-287 B/s): refused, naming the records, rather than written as a network gen then refuses.
    const double bandwidth = 1.0 / per_byte;
    if (!std::isfinite(bandwidth) || !std::isfinite(latency) || bandwidth < 1e6 || bandwidth > 1e14 || latency > 10) {
      const auto slowest = std::max_element(t.begin(), t.end()), fastest = std::min_element(t.begin(), t.end());
      throw std::invalid_argument(fmt::format(
          "calibrate: the {} links' fit is not physical: {:.3g} B/s and a latency of {:.3g} s from {} collective{} "
          "and send{} (their times from {:.3g} s to {:.3g} s); a link runs at 1e6 to 1e14 B/s: check the trace's "
          "durations and sizes",
          inter ? "inter-node" : "intra-node", bandwidth, latency, t.size(), t.size() == 1 ? "" : "s",
          t.size() == 1 ? "" : "s", *fastest, *slowest));
    }
    (inter ? n.inter_latency_s : n.intra_latency_s) = latency;
    (inter ? n.inter_bandwidth : n.intra_bandwidth) = 1.0 / per_byte;
    any = true;
  }
  if (fitted) *fitted = any;
  n.validate("calibrate");
  return n;
}

}  // namespace trainsim
