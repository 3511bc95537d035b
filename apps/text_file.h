// Reading and writing whole text files for the sub-commands.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

namespace trainsim::apps {

/// Reads the whole file into `text`. Returns false when it cannot be read.
inline bool read_text_file(const std::string& path, std::string& text) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  text = ss.str();
  return true;
}

/// Writes `text` to `path` (replacing it), closing the file so that a failed flush is seen too. Returns ""
/// when it was written, else why not, from the system (strerror(errno)): "Permission denied".
inline std::string write_text_file_error(const std::string& path, const std::string& text) {
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return std::strerror(errno ? errno : EIO);
  bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  int write_errno = errno;
  bool closed = std::fclose(f) == 0;
  if (wrote && closed) return {};
  int e = !wrote && write_errno ? write_errno : errno;
  return std::strerror(e ? e : EIO);
}

/// Writes `text` to `path` (replacing it). Returns false when it cannot be written.
inline bool write_text_file(const std::string& path, const std::string& text) {
  return write_text_file_error(path, text).empty();
}

/// Writes `text` to `path` for `command` ("trainsim gen"). When it cannot, prints "COMMAND: cannot write
/// 'PATH': WHY" (WHY from the system: "No such file or directory") to standard error and returns false.
inline bool write_output(const std::string& command, const std::string& path, const std::string& text) {
  std::string why = write_text_file_error(path, text);
  if (why.empty()) return true;
  fmt::print(stderr, "{}: cannot write '{}': {}\n", command, path, why);
  return false;
}

}  // namespace trainsim::apps
