// The "cpu" backend: CpuDevice per rank and a ThreadHub between them (ranks as threads), or a TcpHub (one
// process per rank).
#include <stdexcept>

#include <fmt/format.h>

#include "exec/backend.h"
#include "exec/cpu/cpu_device.h"
#include "exec/cpu/cpu_gemm.h"
#include "exec/cpu/simd.h"
#include "exec/cpu/tcp_comm.h"
#include "exec/cpu/thread_comm.h"
#if TRAINSIM_HAVE_CUDA
#include "exec/backend_module.h"
#endif

namespace trainsim::exec {

namespace {

class CpuBackend final : public LocalBackend {
 public:
  std::string name() const override { return "cpu"; }
  std::unique_ptr<Device> make_device(int, std::chrono::steady_clock::time_point epoch) override {
    return std::make_unique<CpuDevice>(epoch);
  }
  std::unique_ptr<CommHub> make_hub(int world_size, const std::vector<std::vector<int>>& groups,
                                    double timeout_seconds) override {
    return std::make_unique<ThreadHub>(world_size, groups, timeout_seconds);
  }
  std::unique_ptr<CommHub> make_process_hub(ProcessGroup& processes, const std::vector<std::vector<int>>& groups,
                                            double timeout_seconds) override {
    return std::make_unique<TcpHub>(processes, groups, timeout_seconds);
  }
  bool supports_tensor_parallel() const override { return true; }
  bool supports_moe() const override { return true; }
};

// The environment's choices of the CPU kernels (TRAINSIM_GEMM, TRAINSIM_SIMD), checked before any rank starts: a
// bad one is the user's input, refused as invalid_argument (the CLI's "could not start") rather than by the
// first op of every rank. The GEMM libraries are set up here too, on this thread.
void check_cpu_environment() {
  try {
    cpu_detail::gemm_library();
    simd::table();
    cpu_detail::prepare_gemm();  // (oneDNN's JIT kernels made here, before the ranks' threads take the memory)
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());
  }
}

}  // namespace

std::vector<std::string> backend_names() {
#if TRAINSIM_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

std::unique_ptr<LocalBackend> make_backend(const std::string& name) {
  if (name == "cpu") {
    check_cpu_environment();
    return std::make_unique<CpuBackend>();
  }
#if TRAINSIM_HAVE_CUDA
  // The cuda backend is a module loaded on demand (exec/backend_module.h); it throws when no GPU is visible.
  if (name == "cuda") return load_backend_module("cuda", TRAINSIM_CUDA_MODULE_PATH);
#endif
  std::string list;
  for (const auto& n : backend_names()) list += (list.empty() ? "" : ", ") + n;
  throw std::invalid_argument(fmt::format("unknown backend '{}' (this build has: {})", name, list));
}

}  // namespace trainsim::exec
