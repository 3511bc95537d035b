#include "exec/backend_module.h"

#include <dlfcn.h>  // POSIX dlopen/dlsym: the standard way to load a module; nothing to gain from a wrapper

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <vector>

#include <fmt/format.h>

namespace trainsim::exec {

namespace {

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

// The places to look, in order, without duplicates.
std::vector<std::string> candidates(const std::string& name, const std::string& built_path) {
  const std::string file = "libtrainsim_" + name + ".so";
  std::vector<std::string> out;
  if (const char* env = std::getenv(("TRAINSIM_" + upper(name) + "_LIBRARY").c_str()); env && *env) {
    out.emplace_back(env);
    return out;  // an explicit choice is the only one tried: a silent fallback would hide a typo
  }
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back((self.parent_path() / file).string());
  if (!built_path.empty() && std::find(out.begin(), out.end(), built_path) == out.end()) out.push_back(built_path);
  return out;
}

}  // namespace

std::unique_ptr<LocalBackend> load_backend_module(const std::string& name, const std::string& built_path) {
  const auto places = candidates(name, built_path);
  std::string tried;
  void* handle = nullptr;
  std::string where;
  for (const auto& path : places) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      tried += fmt::format("\n  {}: no such file", path);
      continue;
    }
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle) {
      where = path;
      break;
    }
    const char* why = dlerror();
    tried += fmt::format("\n  {}: {}", path, why ? why : "could not be loaded");
  }
  if (!handle)
    throw std::invalid_argument(fmt::format(
        "the {} backend is built as a module (libtrainsim_{}.so) and it could not be loaded; looked at:{}\n"
        "(build it with `cmake --build build --target trainsim_{}`, or name it with TRAINSIM_{}_LIBRARY=PATH; use "
        "--backend cpu otherwise)",
        name, name, tried, name, upper(name)));
  using AbiFn = int (*)();
  using MakeFn = LocalBackend* (*)();
  auto abi = reinterpret_cast<AbiFn>(dlsym(handle, "trainsim_backend_module_abi"));
  auto make = reinterpret_cast<MakeFn>(dlsym(handle, ("trainsim_make_" + name + "_backend").c_str()));
  if (!abi || !make)
    throw std::invalid_argument(
        fmt::format("{} is not a trainsim backend module (it lacks trainsim_backend_module_abi or "
                    "trainsim_make_{}_backend)",
                    where, name));
  if (abi() != kBackendModuleAbi)
    throw std::invalid_argument(fmt::format(
        "{} is a trainsim backend module of another build (interface version {}, this binary's is {}): rebuild it "
        "with this tree",
        where, abi(), kBackendModuleAbi));
  return std::unique_ptr<LocalBackend>(make());
}

}  // namespace trainsim::exec
