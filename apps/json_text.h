// JSON output of the sub-commands.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace trainsim::apps {

/// `j` as indented JSON text. Strings that are not valid UTF-8 (a file name, an error quoting the input's
/// bytes) have each invalid byte replaced by U+FFFD instead of making nlohmann::json throw.
template <typename Json>
std::string json_text(const Json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace trainsim::apps
