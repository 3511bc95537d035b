// The backend loader (exec/backend_module.h) on the test modules of tests/modules/: a good module gives a
// working backend; a missing file, a library that is no module, a module of another build and a throwing
// factory each give a clear std::invalid_argument (or the factory's own error), never a crash.
#include <doctest/doctest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "exec/backend_module.h"

using namespace trainsim;

namespace {

const std::string kDir = TRAINSIM_TEST_MODULE_DIR;

std::string error_of(const std::string& name, const std::string& path) {
  try {
    exec::load_backend_module(name, path);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

// TRAINSIM_FAKE_LIBRARY set for one scope.
struct EnvPath {
  explicit EnvPath(const std::string& v) { ::setenv("TRAINSIM_FAKE_LIBRARY", v.c_str(), 1); }
  ~EnvPath() { ::unsetenv("TRAINSIM_FAKE_LIBRARY"); }
};

}  // namespace

TEST_CASE("backend module: a module of this build gives its backend") {
  auto backend = exec::load_backend_module("fake", kDir + "/libtrainsim_fake.so");
  REQUIRE(backend);
  CHECK(backend->name() == "fake, from a module");
  CHECK(backend->supports_tensor_parallel());
  // Loading again reuses the loaded module (it is never unloaded) and gives a second, independent backend.
  auto again = exec::load_backend_module("fake", kDir + "/libtrainsim_fake.so");
  CHECK(again.get() != backend.get());
  CHECK(again->name() == backend->name());
}

TEST_CASE("backend module: the environment's path is the only one tried") {
  {
    EnvPath env(kDir + "/libtrainsim_fake.so");
    CHECK(exec::load_backend_module("fake", "/no/such/built/path.so")->name() == "fake, from a module");
  }
  EnvPath env(kDir + "/missing.so");
  const std::string e = error_of("fake", kDir + "/libtrainsim_fake.so");
  CHECK(e.find("could not be loaded") != std::string::npos);
  CHECK(e.find(kDir + "/missing.so: no such file") != std::string::npos);
  CHECK(e.find("libtrainsim_fake.so:") == std::string::npos);  // the built path was not tried
  CHECK(e.find("TRAINSIM_FAKE_LIBRARY") != std::string::npos);
}

TEST_CASE("backend module: missing, not a module, another build, a refusing factory") {
  std::string e = error_of("fake", "/no/such/dir/libtrainsim_fake.so");
  CHECK(e.find("/no/such/dir/libtrainsim_fake.so: no such file") != std::string::npos);
  CHECK(e.find("use --backend cpu") != std::string::npos);

  // A file that is no shared object: the loader's own message, with the path.
  e = error_of("fake", std::string(TRAINSIM_SOURCE_DIR) + "/tests/data/corpus.txt");
  CHECK(e.find("corpus.txt: ") != std::string::npos);
  CHECK(e.find("could not be loaded") != std::string::npos);

  // A shared object without the entry points: asked for "other", the fake module has no trainsim_make_other_backend.
  e = error_of("other", kDir + "/libtrainsim_fake.so");
  CHECK(e.find("is not a trainsim backend module") != std::string::npos);

  e = error_of("fake", kDir + "/libtrainsim_stale.so");
  CHECK(e.find("of another build") != std::string::npos);
  CHECK(e.find("interface version " + std::to_string(exec::kBackendModuleAbi + 1)) != std::string::npos);

  e = error_of("fake", kDir + "/libtrainsim_throws.so");
  CHECK(e == "the fake backend's factory refuses, as asked");
}
