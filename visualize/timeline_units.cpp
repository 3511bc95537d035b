#include "visualize/timeline_units.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "sim/world.h"

namespace trainsim::visualize {

namespace {

// At most three significant digits of `v` (>= 0), without an exponent or trailing zeros: "12.2", "94.7", "350", "1.5".
std::string three_digits(double v) {
  if (!(v > 0)) return "0";
  const int exponent = static_cast<int>(std::floor(std::log10(v)));
  const int decimals = std::max(0, 2 - exponent);
  std::string s = fmt::format("{:.{}f}", v, decimals);
  // No trailing zeros ("4.00" -> "4", "1.50" -> "1.5"). Rounding may carry into a fourth digit ("999.6" ->
  // "1000"): still exact enough for a label.
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

}  // namespace

bool real_units(const Trace& trace) {
  return trace.cost_model == "hardware" || measured_trace(trace);
}

bool measured_trace(const Trace& trace) { return trace.cost_model.rfind("measured", 0) == 0; }

std::string time_text(Time t, bool real) {
  if (!real) return format_time(t);
  const double s = to_seconds(t < 0 ? -t : t);
  const std::string sign = t < 0 ? "-" : "";
  if (s == 0) return "0 s";
  if (s >= 1) return sign + three_digits(s) + " s";
  if (s >= 1e-3) return sign + three_digits(s * 1e3) + " ms";
  return sign + three_digits(s * 1e6) + " \u00b5s";
}

std::string memory_text(double v, const std::string& unit) {
  if (unit != "bytes") return format_memory(v) + " " + unit;
  const double a = std::abs(v);
  const std::string sign = v < 0 ? "-" : "";
  if (a < 1024) return fmt::format("{}{:.0f} B", sign, a);
  if (a < 1024.0 * 1024) return sign + three_digits(a / 1024) + " KiB";
  if (a < 1024.0 * 1024 * 1024) return sign + three_digits(a / (1024.0 * 1024)) + " MiB";
  return sign + three_digits(a / (1024.0 * 1024 * 1024)) + " GiB";
}

}  // namespace trainsim::visualize
