#include "schedules/input.h"

#include <filesystem>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

namespace trainsim {

namespace {
std::string size_text(std::size_t bytes) {
  if (bytes % (std::size_t{1} << 30) == 0) return fmt::format("{} GiB", bytes >> 30);
  if (bytes % (std::size_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  return fmt::format("{} bytes", bytes);
}
}  // namespace

std::string read_input_file(const std::string& path, std::size_t limit) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw std::invalid_argument(fmt::format("{}: is a directory", path));
  errno = 0;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument(fmt::format("{}: cannot open the file: {}", path, std::strerror(errno ? errno : EIO)));
  auto too_large = [&] {
    return std::invalid_argument(
        fmt::format("{}: the input is larger than the limit of {} (docs/schedule-format.md, Limits)", path, size_text(limit)));
  };
  std::string text;
  if (std::filesystem::is_regular_file(path, ec)) {
    auto size = std::filesystem::file_size(path, ec);
    if (!ec && size > limit) throw too_large();
    if (!ec) text.reserve(static_cast<std::size_t>(size));
  }
  // Read in pieces whatever the kind of file: a pipe or a device has no size to check first.
  char buf[1 << 16];
  while (f) {
    f.read(buf, sizeof buf);
    auto n = static_cast<std::size_t>(f.gcount());
    if (n > limit - text.size()) throw too_large();
    text.append(buf, n);
  }
  if (f.bad()) throw std::invalid_argument(fmt::format("{}: cannot read the file", path));
  return text;
}

std::string shown(std::string_view text, std::size_t max) {
  std::string s;
  std::size_t n = std::min(text.size(), max);
  for (std::size_t i = 0; i < n; ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) s += fmt::format("\\x{:02x}", c);
    else s += static_cast<char>(c);
  }
  if (text.size() > max) s += fmt::format("... ({} bytes in all)", text.size());
  return s;
}

}  // namespace trainsim
