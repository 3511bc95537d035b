// Two test modules for exec/backend_module.h, built with and without CUDA: libtrainsim_fake.so (a backend
// called "fake", interface version TRAINSIM_FAKE_ABI) and libtrainsim_stale.so (a module of "another build":
// its interface version is one more than this tree's). Neither runs a rank: the loader's test calls name() and
// supports_tensor_parallel() on what it gets, and destroys it.
#include <stdexcept>

#include "exec/backend_module.h"

namespace {

class FakeBackend final : public trainsim::exec::LocalBackend {
 public:
  std::string name() const override { return "fake, from a module"; }
  std::unique_ptr<trainsim::exec::Device> make_device(int, std::chrono::steady_clock::time_point) override {
    throw std::logic_error("the fake backend makes no devices");
  }
  std::unique_ptr<trainsim::exec::CommHub> make_hub(int, const std::vector<std::vector<int>>&, double) override {
    throw std::logic_error("the fake backend makes no communicators");
  }
  std::unique_ptr<trainsim::exec::CommHub> make_process_hub(trainsim::exec::ProcessGroup&,
                                                            const std::vector<std::vector<int>>&, double) override {
    throw std::logic_error("the fake backend makes no communicators");
  }
  bool supports_tensor_parallel() const override { return true; }
};

}  // namespace

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT int trainsim_backend_module_abi() { return trainsim::exec::kBackendModuleAbi + TRAINSIM_FAKE_ABI_OFFSET; }

EXPORT trainsim::exec::LocalBackend* trainsim_make_fake_backend() {
  if (TRAINSIM_FAKE_THROWS) throw std::invalid_argument("the fake backend's factory refuses, as asked");
  return new FakeBackend();
}
