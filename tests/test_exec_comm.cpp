// The CPU backend's communicator (exec/cpu/thread_comm.h): NCCL's semantics on threads. Point-to-point
// messages arrive in order per pair; all-gather is member-major; reduce-scatter gives member i the sum of
// everyone's i-th piece; all-reduce sums in member order (bitwise the same on every member); a call that
// waits too long fails naming what it waits for; abort() ends waiting calls.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "exec/cpu/cpu_device.h"
#include "exec/cpu/thread_comm.h"

using namespace trainsim::exec;

namespace {

// Runs `body(rank, comm, stream)` on `world` threads, each with its own device stream.
template <typename F>
void on_ranks(ThreadHub& hub, int world, F body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      CpuDevice dev(std::chrono::steady_clock::now());
      auto comm = hub.communicator(r);
      dev.submit(0, {}, [&](StreamContext& s) { body(r, *comm, s); }, 0);
      try {
        dev.synchronize();
      } catch (...) {
      }
    });
  for (auto& t : threads) t.join();
}

}  // namespace

TEST_CASE("exec comm: collectives over groups, member-major and summed in order") {
  ThreadHub hub(4, {{0, 1, 2, 3}, {3, 1}}, 30);
  std::vector<std::vector<float>> gathered(4), scattered(4), reduced(4);
  on_ranks(hub, 4, [&](int r, Communicator& c, StreamContext& s) {
    std::vector<float> mine = {float(r), float(10 * r)};
    gathered[r].resize(8);
    c.all_gather(s, mine.data(), gathered[r].data(), 2, 0);
    std::vector<float> full = {float(r), 1, 2, float(r), 100, 200, 300, 400};
    scattered[r].resize(2);
    c.reduce_scatter(s, full.data(), scattered[r].data(), 2, 0);
    if (r == 1 || r == 3) {
      reduced[r] = {float(r) + 0.5f};
      c.all_reduce(s, reduced[r].data(), reduced[r].data(), 1, 1);
    }
  });
  for (int r = 0; r < 4; ++r) CHECK(gathered[r] == std::vector<float>{0, 0, 1, 10, 2, 20, 3, 30});
  CHECK(scattered[0] == std::vector<float>{6, 4});      // Σ (r, 1)
  CHECK(scattered[1] == std::vector<float>{8, 6});      // Σ (2, r)
  CHECK(scattered[2] == std::vector<float>{400, 800});  // Σ (100, 200)
  CHECK(scattered[3] == std::vector<float>{1200, 1600});
  CHECK(reduced[1] == std::vector<float>{5});
  CHECK(reduced[3] == std::vector<float>{5});
}

TEST_CASE("exec comm: point-to-point messages arrive in order per pair, with their tags checked") {
  ThreadHub hub(2, {{0, 1}}, 30);
  std::vector<float> got(3);
  std::string error;
  on_ranks(hub, 2, [&](int r, Communicator& c, StreamContext& s) {
    if (r == 0) {
      for (float v : {1.0f, 2.0f, 3.0f}) c.send(s, &v, sizeof v, 1, "x");
      float w = 9;
      c.send(s, &w, sizeof w, 1, "y");
    } else {
      for (float& v : got) c.recv(s, &v, sizeof v, 0, "x");
      float w;
      try {
        c.recv(s, &w, sizeof w, 0, "z");
      } catch (const CommError& e) {
        error = e.what();
      }
    }
  });
  CHECK(got == std::vector<float>{1, 2, 3});
  CHECK(error.find("expected z") != std::string::npos);
  CHECK(error.find("got y") != std::string::npos);
}

TEST_CASE("exec comm: a missing member times out naming who has not arrived, abort ends waiting calls") {
  ThreadHub hub(3, {{0, 1, 2}}, 0.3);
  std::string error;
  on_ranks(hub, 2, [&](int, Communicator& c, StreamContext& s) {  // rank 2 never comes
    try {
      c.barrier(s, 0);
    } catch (const CommError& e) {
      error = e.what();
    }
  });
  CHECK(error.find("timed out after 0.3 s") != std::string::npos);
  CHECK(error.find("ranks 2 have not arrived") != std::string::npos);

  ThreadHub hub2(2, {{0, 1}}, 60);
  std::string why;
  auto start = std::chrono::steady_clock::now();
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    hub2.abort("rank 1 failed");
  });
  on_ranks(hub2, 1, [&](int, Communicator& c, StreamContext& s) {
    float v;
    try {
      c.recv(s, &v, sizeof v, 1, "x");
    } catch (const CommError& e) {
      why = e.what();
    }
  });
  stopper.join();
  CHECK(why == "rank 1 failed");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("exec comm: an all-to-all whose members disagree on a block's size fails on the receiver, naming it") {
  ThreadHub hub(2, {{0, 1}}, 30);
  std::vector<std::string> errors(2);
  on_ranks(hub, 2, [&](int r, Communicator& c, StreamContext& s) {
    std::vector<float> in(8, float(r)), out(8);
    // rank 0 sends 3 floats to rank 1, which expects 2
    const std::vector<std::size_t> send = r == 0 ? std::vector<std::size_t>{1, 3} : std::vector<std::size_t>{2, 2};
    const std::vector<std::size_t> recv = r == 0 ? std::vector<std::size_t>{1, 2} : std::vector<std::size_t>{3 - 1, 2};
    try {
      c.all_to_all(s, in.data(), send, out.data(), recv, 0);
    } catch (const CommError& e) {
      errors[r] = e.what();
    }
  });
  CHECK(errors[0] == "");
  CHECK(errors[1] == "rank 1: all-to-all over group 0 expects 2 floats from member 0, which sends 3");
}
