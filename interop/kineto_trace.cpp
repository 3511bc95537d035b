#include "interop/kineto_trace.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "schedules/measured_trace.h"

namespace trainsim {

bool is_kineto_trace(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array()) return false;
  if (j.contains("schemaVersion")) return true;
  for (const auto& e : j["traceEvents"])
    if (e.is_object() && e.contains("cat") && e["cat"].is_string()) {
      const std::string cat = e["cat"].get<std::string>();
      if (cat == "kernel" || cat == "cpu_op") return true;
    }
  return false;
}

bool looks_like_kineto_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::string head(1 << 20, '\0');
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(f.gcount()));
  return head.find("\"schemaVersion\"") != std::string::npos || head.find("\"cpu_op\"") != std::string::npos ||
         head.find("\"kernel\"") != std::string::npos;
}

namespace {

// Bytes of one element of an ATen input type as the profiler writes it ("c10::BFloat16", "float", ...); 0 for
// what is not a tensor of a known type.
int element_bytes(const std::string& type) {
  if (type.find("BFloat16") != std::string::npos || type.find("Half") != std::string::npos) return 2;
  if (type.find("Float8") != std::string::npos || type == "bool" || type == "unsigned char" || type == "signed char") return 1;
  if (type == "float") return 4;
  if (type == "double" || type == "long int" || type == "long") return 8;
  if (type == "int") return 4;
  return 0;
}

// Bytes of an NCCL element from the kernel's "dtype" (c10::toString of a ScalarType: "Float", "BFloat16", ...).
int dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, int> sizes = {
      {"Float", 4}, {"BFloat16", 2}, {"Half", 2}, {"Double", 8}, {"Int", 4}, {"Long", 8}, {"Short", 2},
      {"Char", 1},  {"Byte", 1},     {"Bool", 1}, {"Float8_e4m3fn", 1}, {"Float8_e5m2", 1}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// The CPU op a kernel links to.
struct CpuOp {
  std::string name;
  std::vector<std::vector<long long>> dims;  // per input; empty for a non-tensor or a tensor list
  std::vector<std::string> types;
  bool backward = false;
};

// Throws std::invalid_argument for a negative size (the caller names the event).
std::vector<std::vector<long long>> input_dims(const nlohmann::json& args) {
  std::vector<std::vector<long long>> out;
  if (!args.contains("Input Dims") || !args["Input Dims"].is_array()) return out;
  for (const auto& in : args["Input Dims"]) {
    std::vector<long long> shape;
    if (in.is_array())
      for (const auto& d : in) {
        if (!d.is_number_integer()) {  // a tensor list: not one shape
          shape.clear();
          break;
        }
        if (d.get<long long>() < 0)
          throw std::invalid_argument(fmt::format("'Input Dims' holds a negative size ({})", d.get<long long>()));
        shape.push_back(d.get<long long>());
      }
    out.push_back(std::move(shape));
  }
  return out;
}

long long elements(const std::vector<long long>& shape) {
  long long n = 1;
  for (long long d : shape) n *= d;
  return n;
}

// A GEMM's B, M, N, K from its op and inputs; empty when it is not one.
std::vector<long long> gemm_shape(const CpuOp& op) {
  const auto& d = op.dims;
  auto two = [](const std::vector<long long>& a, const std::vector<long long>& b) -> std::vector<long long> {
    if (a.size() == 2 && b.size() == 2 && a[1] == b[0]) return {1, a[0], b[1], a[1]};
    if (a.size() == 3 && b.size() == 3 && a[0] == b[0] && a[2] == b[1]) return {a[0], a[1], b[2], a[2]};
    return {};
  };
  if ((op.name == "aten::mm" || op.name == "aten::bmm") && d.size() >= 2) return two(d[0], d[1]);
  if ((op.name == "aten::addmm" || op.name == "aten::baddbmm") && d.size() >= 3) return two(d[1], d[2]);
  return {};
}

// The input types of a GEMM's two matrices (the two after the bias of addmm and baddbmm).
bool two_byte_gemm(const CpuOp& op) {
  const std::size_t first = op.name == "aten::addmm" || op.name == "aten::baddbmm" ? 1 : 0;
  if (op.types.size() < first + 2) return false;
  return element_bytes(op.types[first]) == 2 && element_bytes(op.types[first + 1]) == 2;
}

bool is_attention(const std::string& name, bool* backward) {
  for (const char* base : {"aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                           "aten::_scaled_dot_product_cudnn_attention"}) {
    if (name == base) return *backward = false, true;
    if (name == std::string(base) + "_backward") return *backward = true, true;
  }
  return false;
}

// A collective's name as PyTorch's ProcessGroupNCCL records it ("allreduce", "_allgather_base",
// "reduce_scatter_tensor_coalesced", "send", ...), folded: lower case, no underscores.
std::string folded(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The ranks of "Process Group Ranks" ("[0, 1, 2, 3]"; a list cut with "..." gives what it shows).
std::vector<int> group_ranks(const nlohmann::json& args) {
  std::vector<int> out;
  if (!args.contains("Process Group Ranks")) return out;
  const auto& v = args["Process Group Ranks"];
  if (v.is_array()) {
    for (const auto& r : v)
      if (r.is_number_integer()) out.push_back(r.get<int>());
    return out;
  }
  if (!v.is_string()) return out;
  const std::string s = v.get<std::string>();
  long long cur = -1;
  for (char c : s) {
    if (std::isdigit(static_cast<unsigned char>(c))) cur = (cur < 0 ? 0 : cur) * 10 + (c - '0');
    else if (cur >= 0) out.push_back(static_cast<int>(cur)), cur = -1;
    if (cur > 1 << 24) return {};
  }
  if (cur >= 0) out.push_back(static_cast<int>(cur));
  return out;
}

double number_arg(const nlohmann::json& args, const char* key, const std::string& where) {
  if (!args.contains(key)) return -1;
  const auto& v = args[key];
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    try {
      return std::stod(v.get<std::string>());
    } catch (const std::exception&) {
    }
  }
  throw std::invalid_argument(fmt::format("{}: field 'args.{}': expected a number", where, key));
}

}  // namespace

namespace {

using Calls = std::map<std::pair<std::string, long long>, MeasuredComm>;

void read_one(const std::string& path, const nlohmann::json& j, int gpus_per_node, KinetoRecords& out, Calls& calls);

}  // namespace

KinetoRecords read_kineto_traces(const std::vector<std::string>& paths, int gpus_per_node) {
  if (gpus_per_node < 1) gpus_per_node = 1;
  KinetoRecords out;
  // Collectives by (group name, sequence number) over the files: the shortest member.
  Calls calls;
  for (const std::string& path : paths) {
    const nlohmann::json j = read_trace_json(path);
    try {
      read_one(path, j, gpus_per_node, out, calls);
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(fmt::format("{}: a malformed event: {}", path, e.what()));
    }
  }
  for (auto& [key, c] : calls) out.comm.push_back(c);
  return out;
}

namespace {

void read_one(const std::string& path, const nlohmann::json& j, int gpus_per_node, KinetoRecords& out, Calls& calls) {
  {
    if (!is_kineto_trace(j))
      throw std::invalid_argument(fmt::format("{}: not a PyTorch profiler (Kineto) trace: no schemaVersion, no kernel "
                                              "or cpu_op events",
                                              path));
    static const nlohmann::json no_args = nlohmann::json::object();
    // CPU ops by External id, and the backward's intervals per (pid, tid).
    std::map<long long, CpuOp> ops;
    std::map<std::pair<std::string, std::string>, std::vector<std::pair<double, double>>> backward;
    struct Timed {
      long long id;
      std::pair<std::string, std::string> thread;
      double ts;
    };
    std::vector<Timed> op_times;
    std::map<long long, double> kernel_us;  // External id -> GPU time of its kernels (compute)
    std::map<long long, long long> kernel_count;
    int index = 0;
    for (const auto& e : j["traceEvents"]) {
      ++index;
      if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("cat") || !e["cat"].is_string()) continue;
      const std::string where = fmt::format("{}: traceEvents[{}]", path, index - 1);
      const std::string cat = e["cat"].get<std::string>();
      if (cat != "cpu_op" && cat != "kernel") continue;
      if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number())
        throw std::invalid_argument(fmt::format("{}: a complete event needs numbers 'ts' and 'dur' (microseconds)", where));
      const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
      if (dur < 0) throw std::invalid_argument(fmt::format("{}: 'dur' is negative", where));
      const auto& args = e.contains("args") && e["args"].is_object() ? e["args"] : no_args;
      const std::string name = e.value("name", "");
      const auto thread = std::make_pair(e.contains("pid") ? e["pid"].dump() : "", e.contains("tid") ? e["tid"].dump() : "");
      const double ext = number_arg(args, "External id", where);
      if (cat == "cpu_op") {
        if (name.rfind("autograd::engine::evaluate_function: ", 0) == 0) backward[thread].push_back({ts, ts + dur});
        if (ext < 0) continue;
        CpuOp op;
        op.name = name;
        try {
          op.dims = input_dims(args);
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument(fmt::format("{}: {}", where, e.what()));
        }
        if (args.contains("Input type") && args["Input type"].is_array())
          for (const auto& t : args["Input type"]) op.types.push_back(t.is_string() ? t.get<std::string>() : "");
        ops[static_cast<long long>(ext)] = std::move(op);
        op_times.push_back({static_cast<long long>(ext), thread, ts});
        continue;
      }
      ++out.kernels;
      if (args.contains("Collective name")) {  // an NCCL kernel (Kineto copies the record_param_comms metadata)
        const std::string coll = folded(args["Collective name"].is_string() ? args["Collective name"].get<std::string>() : "");
        const double in = number_arg(args, "In msg nelems", where), outn = number_arg(args, "Out msg nelems", where);
        const double n = number_arg(args, "Group size", where);
        const int esize = args.contains("dtype") && args["dtype"].is_string() ? dtype_bytes(args["dtype"].get<std::string>()) : 0;
        MeasuredComm c;
        if (coll.find("allreduce") != std::string::npos) c.collective = hw::Collective::AllReduce;
        else if (coll.find("allgather") != std::string::npos) c.collective = hw::Collective::AllGather;
        else if (coll.find("reducescatter") != std::string::npos) c.collective = hw::Collective::ReduceScatter;
        else if (coll == "broadcast") c.collective = hw::Collective::Broadcast;
        else if (coll == "reduce") c.collective = hw::Collective::Reduce;
        else if (coll == "send") c.p2p = true;
        else {
          ++out.left_out;  // recv (waits for its send), all-to-all, barrier, gather, scatter
          continue;
        }
        if (esize == 0 || in < 0 || outn < 0 || (!c.p2p && n < 1)) {
          ++out.left_out;
          continue;
        }
        c.ranks = c.p2p ? 2 : static_cast<int>(n);
        c.bytes = (c.collective == hw::Collective::AllGather && !c.p2p ? outn : in) * esize;
        const std::vector<int> ranks = group_ranks(args);
        if (!ranks.empty()) {
          const int node = ranks.front() / gpus_per_node;
          c.inter_node = std::any_of(ranks.begin(), ranks.end(), [&](int r) { return r / gpus_per_node != node; });
        } else {
          c.inter_node = c.ranks > gpus_per_node;
        }
        c.seconds = dur * 1e-6;
        if (c.ranks < 2 || c.bytes <= 0) {
          ++out.left_out;
          continue;
        }
        const double seq = number_arg(args, "Seq", where);
        if (seq >= 0 && args.contains("Process Group Name") && !c.p2p) {
          const auto key = std::make_pair(args["Process Group Name"].dump(), static_cast<long long>(seq));
          auto [it, fresh] = calls.emplace(key, c);
          if (!fresh) it->second.seconds = std::min(it->second.seconds, c.seconds);
        } else {
          out.comm.push_back(c);
        }
        continue;
      }
      if (ext < 0) {
        ++out.left_out;
        continue;
      }
      kernel_us[static_cast<long long>(ext)] += dur;
      ++kernel_count[static_cast<long long>(ext)];
    }
    // Backward ops: inside an autograd evaluate_function on their thread.
    for (auto& [thread, spans] : backward) std::sort(spans.begin(), spans.end());
    for (const Timed& t : op_times) {
      auto it = backward.find(t.thread);
      if (it == backward.end()) continue;
      const auto& spans = it->second;
      // The last span that starts at or before the op (the engine's evaluate_functions follow each other).
      auto after = std::upper_bound(spans.begin(), spans.end(), std::make_pair(t.ts, 1e300));
      if (after != spans.begin() && t.ts <= std::prev(after)->second) ops[t.id].backward = true;
    }
    for (const auto& [id, us] : kernel_us) {
      auto it = ops.find(id);
      if (it == ops.end()) {
        out.left_out += static_cast<int>(kernel_count[id]);
        continue;
      }
      const CpuOp& op = it->second;
      MeasuredWork w;
      w.op = op.name;
      w.seconds = us * 1e-6;
      bool attn_backward = false;
      if (const auto g = gemm_shape(op); !g.empty()) {
        if (!two_byte_gemm(op)) {
          out.left_out += static_cast<int>(kernel_count[id]);
          continue;
        }
        w.cls = op.backward ? MeasuredWork::Class::BackwardGemm : MeasuredWork::Class::ForwardGemm;
        w.shape = g;
        w.flops = 2.0 * static_cast<double>(g[0]) * static_cast<double>(g[1]) * static_cast<double>(g[2]) *
                  static_cast<double>(g[3]);
      } else if (is_attention(op.name, &attn_backward)) {
        // q, k, v: [B, H, S, D] (for the backward, after the output grad).
        const std::size_t q = attn_backward ? 1 : 0;
        if (op.dims.size() < q + 2 || op.dims[q].size() != 4 || op.dims[q + 1].size() != 4) {
          out.left_out += static_cast<int>(kernel_count[id]);
          continue;
        }
        const auto& qd = op.dims[q];
        const auto& kd = op.dims[q + 1];
        w.cls = MeasuredWork::Class::Attention;
        w.shape = {qd[0], qd[1], qd[2], kd[2], qd[3]};
        w.flops = (attn_backward ? 8.0 : 4.0) * static_cast<double>(qd[0]) * static_cast<double>(qd[1]) *
                  static_cast<double>(qd[2]) * static_cast<double>(kd[2]) * static_cast<double>(qd[3]);
      } else {
        double bytes = 0, largest = 0;
        long long count = 0;
        for (std::size_t i = 0; i < op.dims.size() && i < op.types.size(); ++i) {
          const int eb = element_bytes(op.types[i]);
          if (eb == 0 || op.dims[i].empty()) continue;
          const double b = static_cast<double>(elements(op.dims[i])) * eb;
          bytes += b, largest = std::max(largest, b), count += elements(op.dims[i]);
        }
        if (bytes <= 0) {
          out.left_out += static_cast<int>(kernel_count[id]);
          continue;
        }
        w.cls = MeasuredWork::Class::MemoryBound;
        w.shape = {count};
        w.bytes = bytes + largest;
      }
      out.work.push_back(std::move(w));
    }
  }
}

}  // namespace

Calibration calibrate_kineto(const std::vector<std::string>& files, const hw::HardwareSetting& base) {
  if (files.empty()) throw std::invalid_argument("calibrate: no trace given");
  const KinetoRecords r = read_kineto_traces(files, base.network.gpus_per_node);
  if (r.work.empty())
    throw std::invalid_argument(fmt::format("calibrate: no GEMM, attention or memory-bound kernel with its op's shapes in "
                                            "{} (profile with record_shapes=True and CUDA activities)",
                                            files.front()));
  Calibration c;
  c.traces = files;
  c.device = fit_device(r.work, base.device, &c.kernel_floor_s);
  c.network = fit_network(r.comm, base.network, &c.network_fitted);
  c.compute_ops = static_cast<int>(r.work.size());
  c.comm_ops = static_cast<int>(r.comm.size());
  c.kernels = r.kernels;
  c.left_out = r.left_out;
  c.steps = 0;
  return c;
}

}  // namespace trainsim
