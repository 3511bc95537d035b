#include "schedules/measured_trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "schedules/input.h"
#include "schedules/text_format.h"

namespace trainsim {

nlohmann::json read_trace_json(const std::string& path) {
  std::string text;
  text = read_input_file(path);  // "PATH: why"
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::invalid_argument(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
}

namespace {

std::vector<std::string> names(const nlohmann::json& args, const char* key) {
  std::vector<std::string> out;
  if (!args.contains(key) || !args[key].is_array()) return out;
  for (const auto& x : args[key])
    if (x.is_string()) out.push_back(x.get<std::string>());
  return out;
}

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

MeasuredTrace read_measured_trace(const std::string& path) {
  nlohmann::json j = read_trace_json(path);
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array() || !j.contains("otherData") ||
      !j["otherData"].is_object())
    throw std::invalid_argument(fmt::format("{}: not a trainsim trace (no traceEvents and otherData)", path));
  const auto& other = j["otherData"];
  if (!other.contains("layers") || !other["layers"].is_number_integer())
    throw std::invalid_argument(fmt::format("{}: field 'otherData.layers': expected an integer", path));
  MeasuredTrace t;
  t.path = path;
  t.layers = other["layers"].get<int>();
  if (other.contains("model") && other["model"].is_object()) t.model = other["model"];
  std::map<int, MeasuredStep> steps;
  try {
    if (other.contains("steps") && other["steps"].is_array()) {
      for (const auto& s : other["steps"]) {
        const int step = s.at("step").get<int>();
        steps[step].step = step;
        steps[step].makespan_s = s.at("makespan_us").get<double>() * 1e-6;
      }
    } else {
      steps[0].makespan_s = other.value("makespan_us", 0.0) * 1e-6;
    }
    for (const auto& e : j["traceEvents"]) {
      if (!e.is_object() || e.value("ph", "") != "X") continue;
      const std::string name = e.value("name", "");
      const auto kind = op_kind_from_name(name.substr(0, name.find(' ')));
      if (!kind) continue;
      static const nlohmann::json no_args = nlohmann::json::object();
      const auto& args = e.contains("args") && e["args"].is_object() ? e["args"] : no_args;
      MeasuredOp op;
      op.kind = *kind;
      if (auto at = name.find(" L"); at != std::string::npos) op.layer = std::stoi(name.substr(at + 2));
      op.tid = e.value("tid", 0LL);
      op.batches = args.value("batches", std::string());
      op.reads = names(args, "reads");
      op.writes = names(args, "writes");
      op.peer = args.value("peer", -1);
      op.group = args.value("group", -1);
      op.start_s = e.value("ts", 0.0) * 1e-6;
      const double dur = e.value("dur", 0.0);
      if (!(dur >= 0) || !std::isfinite(dur) || !std::isfinite(op.start_s))
        throw std::invalid_argument(fmt::format("the event '{}' (pid {}) has a negative or not finite 'ts' or 'dur' ({})",
                                                shown(name), e.value("pid", 1), dur));
      op.end_s = op.start_s + dur * 1e-6;
      const int rank = e.value("pid", 1) - 1;
      if (rank < 0 || rank > 1 << 20) throw std::invalid_argument(fmt::format("pid {} is not a rank + 1", rank + 1));
      const int step = args.value("step", 0);
      MeasuredStep& s = steps[step];
      s.step = step;
      if (static_cast<int>(s.ranks.size()) <= rank) s.ranks.resize(rank + 1);
      s.ranks[rank].push_back(std::move(op));
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(fmt::format("{}: malformed trace: {}", path, e.what()));
  } catch (const std::logic_error& e) {  // std::stoi, a bad pid
    throw std::invalid_argument(fmt::format("{}: malformed trace: {}", path, e.what()));
  }
  for (auto& [step, s] : steps) t.steps.push_back(std::move(s));
  return t;
}

}  // namespace trainsim
