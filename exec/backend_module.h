// Backends built as separate shared modules, loaded only by the runs that use them (dlopen). The "cuda" backend
// is one: its libraries (cuBLAS, cuBLASLt, NCCL, the CUDA runtime) cost about 150 MB of resident memory the
// moment they are loaded, which every other command (sim, gen, plan) would otherwise pay at start-up (issue 34's
// 200 MB goal for a 16,384-rank symmetric simulation).
//
// The module and the binary that loads it are built from one tree: the module exports
// trainsim_backend_module_abi(), which must equal kBackendModuleAbi, and trainsim_make_<name>_backend(), which
// returns a new LocalBackend the caller owns. The module is never unloaded (RTLD_NODELETE).
#pragma once

#include <memory>
#include <string>

#include "exec/backend.h"

namespace trainsim::exec {

/// Bumped whenever LocalBackend, Device, CommHub or Buffer change their layout or virtual functions: a module
/// from another build is refused rather than called through a different vtable.
inline constexpr int kBackendModuleAbi = 1;

/// The backend `name` from the module libtrainsim_<name>.so, looked for in $TRAINSIM_<NAME>_LIBRARY (a path)
/// when set, else next to the running executable, else at `built_path` (where the build wrote it; may be
/// empty). Throws std::invalid_argument naming every place looked and the loader's message when the module is
/// missing, fails to load (for "cuda": no CUDA libraries on this machine), or is from another build; whatever
/// the module's factory throws passes through.
std::unique_ptr<LocalBackend> load_backend_module(const std::string& name, const std::string& built_path);

}  // namespace trainsim::exec
