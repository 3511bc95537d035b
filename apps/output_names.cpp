#include "apps/output_names.h"

#include <algorithm>

#include <fmt/format.h>

#include "apps/schedule_input.h"

namespace trainsim::apps {

std::string output_name_error(const std::string& path, const std::vector<std::string>& extensions,
                              const std::string& what) {
  const std::string e = extension(path);
  if (e.empty() || std::find(extensions.begin(), extensions.end(), e) != extensions.end()) return {};
  std::string names;
  for (std::size_t i = 0; i < extensions.size(); ++i)
    names += (i == 0 ? "" : i + 1 == extensions.size() ? " or " : ", ") + extensions[i];
  return fmt::format("'{}' ends in '{}', but this option writes {}: name it {}", path, e, what, names);
}

CLI::Validator output_named(std::vector<std::string> extensions, std::string what, std::string name) {
  return CLI::Validator(
      [extensions = std::move(extensions), what = std::move(what)](std::string& value) {
        return output_name_error(value, extensions, what);
      },
      std::move(name));
}

}  // namespace trainsim::apps
