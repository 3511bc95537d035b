// libFuzzer target: the PyTorch pipelining CSV importer, then the simulator on what it imports. Import may
// throw std::invalid_argument (a bad CSV); nothing else may escape, and simulate() must not throw.
#include <stdexcept>

#include "fuzz/common.h"
#include "interop/pytorch_csv.h"
#include "schedules/replay.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  trainsim::Schedule s;
  try {
    s = trainsim::import_pytorch_csv(trainsim::fuzz::text_of(data, size), 0, {}, "fuzz.csv");
  } catch (const std::invalid_argument&) {
    return 0;
  }
  trainsim::SimResult r = trainsim::simulate(s);
  (void)r;
  return 0;
}
