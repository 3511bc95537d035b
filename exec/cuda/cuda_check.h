// Error checking for the CUDA backend: every CUDA runtime and cuBLAS call goes through TS_CUDA / TS_CUBLAS,
// which turn a failure into an exception naming the error, the call and where it was made. Kernel launches
// are followed by TS_CUDA(cudaGetLastError()); errors of the kernels themselves surface at the next
// synchronising call (CudaDevice::synchronize) as the same kind of exception.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace trainsim::exec::cuda {

/// A failed CUDA runtime, cuBLAS or NCCL call.
struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  throw CudaError(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + call +
                  " at " + file + ":" + std::to_string(line));
}

inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) throw_cuda(e, call, file, line);
}

}  // namespace trainsim::exec::cuda

#define TS_CUDA(call) ::trainsim::exec::cuda::check((call), #call, __FILE__, __LINE__)
