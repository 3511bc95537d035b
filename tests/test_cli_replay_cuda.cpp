// `trainsim replay --backend cuda` on a machine without a GPU (CI): a clear error and exit code 2, never a
// crash. Where the binary was built without CUDA, "cuda" is an unknown backend (also exit 2).
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>

#include "cli_helpers.h"
#include "exec/backend.h"

using namespace trainsim;
using namespace trainsim::testing;

TEST_CASE("trainsim replay --backend cuda without a GPU says so and exits 2") {
  const std::string args = std::string("replay ddp --model tiny --steps 1 --backend cuda --data ") +
                           TRAINSIM_SOURCE_DIR + "/tests/data/corpus.txt";
  auto names = exec::backend_names();
  if (std::find(names.begin(), names.end(), "cuda") == names.end()) {
    CommandResult r = run_trainsim(args, true);
    CHECK(r.exit_code == 2);
    CHECK(r.out.find("unknown backend 'cuda'") != std::string::npos);
    return;
  }
  bool gpu = true;
  try {
    exec::make_backend("cuda");
  } catch (const std::invalid_argument& e) {
    gpu = false;
    CHECK(std::string(e.what()).find("none is visible") != std::string::npos);
  }
  if (gpu) {
    MESSAGE("a GPU is visible here: the no-GPU error cannot be checked (tests/gpu/ cover the GPU)");
    return;
  }
  CommandResult r = run_trainsim(args, true);
  INFO(r.out);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("the cuda backend needs an NVIDIA GPU, and none is visible here") != std::string::npos);
  CHECK(r.out.find("use --backend cpu") != std::string::npos);
}
