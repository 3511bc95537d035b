// Small text helpers shared by tests that inspect generated documents (SVG, DOT, JSON).
#pragma once

#include <cstddef>
#include <string_view>

namespace trainsim::testing {

/// Number of non-overlapping occurrences of `needle` in `hay`.
inline std::size_t count(std::string_view hay, std::string_view needle) {
  std::size_t n = 0;
  for (std::size_t pos = hay.find(needle); pos != std::string_view::npos; pos = hay.find(needle, pos + needle.size()))
    ++n;
  return n;
}

}  // namespace trainsim::testing
