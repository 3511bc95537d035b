// CLI11 checks for numeric options whose NaN, infinity, zero, negative, out-of-range or unrepresentable value
// would silently change what a command does (a memory limit turned off, a learning rate of NaN training
// garbage, a learning rate that rounds to 0 in a float, a seed that wraps, a timeout that overflows).
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace trainsim::apps {

/// Accepts a finite number of at least `min` (above `min` when `strict`), written as std::stod reads it;
/// refuses text, NaN, inf and smaller values with "expected a finite number of at least MIN (NOTE), got
/// 'VALUE'" (NOTE omitted when empty). The check's name is NAME.
CLI::Validator finite_number(double min, bool strict, std::string note, std::string name);

/// Accepts a finite number from `min` to `max` (both included), written as std::stod reads it; refuses text,
/// NaN, inf and values outside with "expected a finite number from MIN to MAX (NOTE), got 'VALUE'".
CLI::Validator number_in(double min, double max, std::string note, std::string name);

/// For an option stored in a float: accepts a finite number from `min` to `max`, bounds taken within [1e-37,
/// 1e37] so that the float holds the value without rounding it to 0, a subnormal or inf, or exactly 0 when
/// `zero_ok`; refuses anything else with "expected [0 or ]a finite number from MIN to MAX (NOTE), got 'VALUE'".
CLI::Validator float_in(double min, double max, bool zero_ok, std::string note, std::string name);

/// Accepts a whole number in decimal digits (a leading '-' only where `min` < 0) from `min` to `max`; refuses
/// anything else, e.g. "1e30", "-1" for a count, or a value that would wrap its type, with "expected a whole
/// number from MIN to MAX (NOTE), got 'VALUE'".
CLI::Validator integer_in(long long min, unsigned long long max, std::string note, std::string name);

}  // namespace trainsim::apps
