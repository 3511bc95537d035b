#include <stdexcept>

#include "schedules/generators.h"

namespace trainsim {

const std::vector<std::string>& generator_kinds() {
  static const std::vector<std::string> kinds;
  return kinds;
}

Schedule generate(const std::string& kind, const GenOptions&) {
  throw std::invalid_argument("unknown generator '" + kind + "'");
}

}  // namespace trainsim
