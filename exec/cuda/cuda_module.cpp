// The entry points of libtrainsim_cuda.so, the cuda backend as a module (exec/backend_module.h): the only
// symbols it exports. The backend's own errors (no GPU visible, a bad TRAINSIM_CUDA_DEVICE) are thrown through
// trainsim_make_cuda_backend to the loader's caller, as std::invalid_argument.
#include "exec/backend_module.h"
#include "exec/cuda/cuda_backend.h"

#define TRAINSIM_MODULE_EXPORT extern "C" __attribute__((visibility("default")))

TRAINSIM_MODULE_EXPORT int trainsim_backend_module_abi() { return trainsim::exec::kBackendModuleAbi; }

TRAINSIM_MODULE_EXPORT trainsim::exec::LocalBackend* trainsim_make_cuda_backend() {
  return trainsim::exec::cuda::make_cuda_backend().release();
}
