// Reading and writing whole text files for the sub-commands.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

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

/// Writes `text` to `path` (replacing it), closing the file so that a failed flush is seen too.
/// Returns false when it cannot be written.
inline bool write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  return static_cast<bool>(f);
}

}  // namespace trainsim::apps
