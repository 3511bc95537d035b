#include "apps/number_check.h"

#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

namespace trainsim::apps {

namespace {

// `value` read whole as std::strtod reads it (overflow gives inf, underflow a value at or near 0); nullopt for
// text, an empty string, leading blanks or trailing characters.
std::optional<double> read_double(const std::string& value) {
  if (value.empty() || std::isspace(static_cast<unsigned char>(value.front()))) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (end != value.c_str() + value.size()) return std::nullopt;
  return v;
}

std::string with_note(const std::string& note) { return note.empty() ? "" : " (" + note + ")"; }

}  // namespace

CLI::Validator finite_number(double min, bool strict, std::string note, std::string name) {
  return CLI::Validator(
      [min, strict, note](std::string& value) -> std::string {
        std::optional<double> v = read_double(value);
        if (!v || !std::isfinite(*v) || *v < min || (strict && *v == min))
          return fmt::format("expected a finite number {} {}{}, got '{}'", strict ? "above" : "of at least", min,
                             with_note(note), value);
        return {};
      },
      std::move(name));
}

CLI::Validator number_in(double min, double max, std::string note, std::string name) {
  return CLI::Validator(
      [min, max, note](std::string& value) -> std::string {
        std::optional<double> v = read_double(value);
        if (!v || !std::isfinite(*v) || *v < min || *v > max)
          return fmt::format("expected a finite number from {:g} to {:g}{}, got '{}'", min, max, with_note(note), value);
        return {};
      },
      std::move(name));
}

CLI::Validator float_in(double min, double max, bool zero_ok, std::string note, std::string name) {
  // Round bounds inside a float's normal range (FLT_MIN is about 1.2e-38, FLT_MAX 3.4e38), so that the bound the
  // message names is itself accepted when typed.
  min = std::max(min, 1e-37);
  max = std::min(max, 1e37);
  return CLI::Validator(
      [min, max, zero_ok, note](std::string& value) -> std::string {
        std::optional<double> v = read_double(value);
        const bool zero = v && *v == 0;
        if (zero && zero_ok) return {};
        if (!v || !std::isfinite(*v) || *v < min || *v > max)
          return fmt::format("expected {}a finite number from {:g} to {:g}{}, got '{}'", zero_ok ? "0 or " : "", min, max,
                             with_note(note), value);
        return {};
      },
      std::move(name));
}

CLI::Validator integer_in(long long min, unsigned long long max, std::string note, std::string name) {
  return CLI::Validator(
      [min, max, note](std::string& value) -> std::string {
        const char* first = value.data();
        const char* last = value.data() + value.size();
        bool ok = false;
        if (!value.empty() && value.front() == '-') {
          long long v = 0;
          auto [end, ec] = std::from_chars(first, last, v);
          ok = ec == std::errc() && end == last && v >= min &&
               (v < 0 || static_cast<unsigned long long>(v) <= max);
        } else if (!value.empty() && value.front() >= '0' && value.front() <= '9') {
          unsigned long long v = 0;
          auto [end, ec] = std::from_chars(first, last, v);
          ok = ec == std::errc() && end == last && v <= max && (min <= 0 || v >= static_cast<unsigned long long>(min));
        }
        if (!ok) return fmt::format("expected a whole number from {} to {}{}, got '{}'", min, max, with_note(note), value);
        return {};
      },
      std::move(name));
}

}  // namespace trainsim::apps
