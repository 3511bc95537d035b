// Reading numbers out of JSON without nlohmann's silent conversions (get<int>() narrows 4294967312 to 16, an
// unsigned above LLONG_MAX wraps, 1e39 becomes inf as a float): the checks that the manifest readers
// (exec/checkpoint.cpp's Fields, exec/model_config.cpp's model_from_json) share; each words its own errors.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

namespace trainsim::exec {

/// The value of an integer JSON number, or nullopt when `v` is not an integer or is above LLONG_MAX.
inline std::optional<long long> json_integer(const nlohmann::json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<long long>::max()))
    return std::nullopt;
  return v.get<long long>();
}

/// The value of a JSON number that a float holds finitely, or nullopt (not a number, not finite, beyond FLT_MAX).
inline std::optional<float> json_float(const nlohmann::json& v) {
  if (!v.is_number()) return std::nullopt;
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) return std::nullopt;
  return static_cast<float>(d);
}

}  // namespace trainsim::exec
