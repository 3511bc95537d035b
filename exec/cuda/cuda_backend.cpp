#include "exec/cuda/cuda_backend.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "exec/cuda/cuda_device.h"
#include "exec/cuda/local_comm.h"
#include "exec/cuda/nccl_comm.h"

namespace trainsim::exec::cuda {

namespace {

class CudaBackend final : public LocalBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  std::string name() const override { return "cuda"; }
  /// The vocabulary-parallel kernels are written (exec/cuda/cuda_kernels.cu); like the rest of the backend they
  /// have been compiled, never run on a GPU (docs/executor.md §7).
  bool supports_tensor_parallel() const override { return true; }
  bool supports_moe() const override { return true; }  // (exec/moe.h's kernels and the all-to-all: never run on a GPU)
  std::unique_ptr<Device> make_device(int, std::chrono::steady_clock::time_point epoch) override {
    return std::make_unique<CudaDevice>(device_, epoch);
  }
  std::unique_ptr<CommHub> make_hub(int world_size, const std::vector<std::vector<int>>& groups,
                                    double timeout_seconds) override {
    const char* comm = std::getenv("TRAINSIM_CUDA_COMM");
    if (comm && std::string(comm) == "nccl") {
      if (world_size != 1)
        throw std::invalid_argument(fmt::format(
            "TRAINSIM_CUDA_COMM=nccl needs one rank per GPU; this schedule has {} ranks on one GPU", world_size));
      return make_nccl_single_hub(groups, timeout_seconds);
    }
    return make_local_hub(world_size, groups, timeout_seconds);
  }
  /// One process per rank with NCCL across processes (the rendezvous's job id as the NCCL unique id) is not
  /// written yet: a clear error rather than a wrong run.
  std::unique_ptr<CommHub> make_process_hub(ProcessGroup&, const std::vector<std::vector<int>>&, double) override {
    throw std::invalid_argument(
        "the cuda backend does not run one process per rank yet (NCCL across processes is not written); run its "
        "ranks as logical ranks in one process, or use --backend cpu under the launcher");
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<LocalBackend> make_cuda_backend() {
  std::string why;
  const int n = visible_devices(&why);
  if (n == 0)
    throw std::invalid_argument(fmt::format(
        "the cuda backend needs an NVIDIA GPU, and none is visible here ({}); use --backend cpu", why));
  int device = 0;
  if (const char* d = std::getenv("TRAINSIM_CUDA_DEVICE")) {
    try {
      device = std::stoi(d);
    } catch (const std::exception&) {
      device = -1;
    }
    if (device < 0 || device >= n)
      throw std::invalid_argument(fmt::format("TRAINSIM_CUDA_DEVICE={} is not one of the {} visible GPUs", d, n));
  }
  return std::make_unique<CudaBackend>(device);
}

}  // namespace trainsim::exec::cuda
