#include "apps/number_check.h"

#include <cmath>
#include <exception>

#include <fmt/format.h>

namespace trainsim::apps {

CLI::Validator finite_number(double min, bool strict, std::string note, std::string name) {
  return CLI::Validator(
      [min, strict, note](std::string& value) -> std::string {
        double v = 0;
        std::size_t used = 0;
        try {
          v = std::stod(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != value.size() || value.empty() || !std::isfinite(v) || v < min || (strict && v == min))
          return fmt::format("expected a finite number {} {}{}, got '{}'", strict ? "above" : "of at least", min,
                             note.empty() ? "" : " (" + note + ")", value);
        return {};
      },
      std::move(name));
}

}  // namespace trainsim::apps
