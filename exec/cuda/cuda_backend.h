// The "cuda" LocalBackend (issue 8): logical ranks, each a CudaDevice on the same GPU, in this process,
// exchanging data through the device-local communicator (local_comm.h). TRAINSIM_CUDA_DEVICE picks the GPU
// (default 0); TRAINSIM_CUDA_COMM=nccl uses NCCL instead (world size 1 only: one NCCL communicator cannot
// hold two ranks on one GPU). NOT YET RUN ON A GPU.
#pragma once

#include <memory>

#include "exec/backend.h"

namespace trainsim::exec::cuda {

/// The backend. Throws std::invalid_argument naming the reason when no GPU is visible (cudaGetDeviceCount).
std::unique_ptr<LocalBackend> make_cuda_backend();

}  // namespace trainsim::exec::cuda
