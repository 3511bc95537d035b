// A CLI11 check for numeric options whose NaN, infinity or a negative value would silently change what a
// command does (a memory limit turned off, a learning rate of NaN training garbage).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace trainsim::apps {

/// Accepts a finite number of at least `min` (above `min` when `strict`), written as std::stod reads it;
/// refuses text, NaN, inf and smaller values with "expected a finite number of at least MIN (NOTE), got
/// 'VALUE'" (NOTE omitted when empty). The check's name is NAME.
CLI::Validator finite_number(double min, bool strict, std::string note, std::string name);

}  // namespace trainsim::apps
