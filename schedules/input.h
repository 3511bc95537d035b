// Reading input files with a size limit, and quoting input in error messages.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "schedules/limits.h"

namespace trainsim {

/// The whole content of `path`: a regular file, or anything else that can be read (a pipe, a device,
/// process substitution), read only up to `limit` bytes. Throws std::invalid_argument "PATH: why" when it
/// cannot be opened or read, is a directory, or holds more than `limit` bytes.
std::string read_input_file(const std::string& path, std::size_t limit = kMaxInputBytes);

/// `text` as an error message quotes it: control bytes (and DEL) written as \xNN, and cut after `max`
/// bytes with "... (N bytes in all)", so that a 10 MB token or raw escape sequences never reach a terminal.
std::string shown(std::string_view text, std::size_t max = kMaxShownBytes);

}  // namespace trainsim
