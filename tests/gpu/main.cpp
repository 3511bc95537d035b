// The GPU tests (label `gpu`): they need an NVIDIA GPU. Where none is visible the whole binary reports
// "skipped" (exit code 77, ctest's SKIP_RETURN_CODE) without running a test case.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "exec/cuda/cuda_device.h"

int main(int argc, char** argv) {
  std::string why;
  if (trainsim::exec::cuda::visible_devices(&why) == 0) {
    std::printf("SKIPPED: no GPU visible (%s); the CUDA backend's tests need one\n", why.c_str());
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
