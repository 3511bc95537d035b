// Shared by the libFuzzer targets (fuzz/README.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace trainsim::fuzz {

/// The fuzzer's bytes as a string.
inline std::string text_of(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace trainsim::fuzz
