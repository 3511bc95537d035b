// Checkpoints of a replay: saving at step k and resuming gives the same losses and weights as running
// straight through, bit for bit; a checkpoint of another schedule, model, seed, run length or corpus, or a
// corrupt one, is refused with a clear error.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "cli_helpers.h"
#include "exec/checkpoint.h"
#include "exec_helpers.h"
#include "schedules/generators.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

Schedule fsdp2() {
  GenOptions g;
  g.dp = 2, g.layers = 2, g.microbatches = 2;
  return generate("fsdp", g);
}

}  // namespace

TEST_CASE("exec checkpoint: save at step 3, resume, and the run is the same bit for bit") {
  for (const char* kind : {"fsdp", "1f1b", "zero1"}) {
    INFO(kind);
    GenOptions g;
    g.dp = 2, g.layers = 2, g.microbatches = 2, g.stages = 2;
    Schedule s = generate(kind, g);
    auto dir = fresh_dir(std::string("ckpt-") + kind);
    exec::ReplayOptions straight = tiny_options(s, 6);
    straight.save_dir = (dir / "straight").string();
    exec::ReplayResult a = exec::replay(s, straight);
    REQUIRE(a.ok);

    exec::ReplayOptions first = tiny_options(s, 6);
    first.stop_after = 3;
    first.save_dir = (dir / "half").string();
    exec::ReplayResult b = exec::replay(s, first);
    REQUIRE(b.ok);
    REQUIRE(b.losses.size() == 3);

    exec::ReplayOptions rest = tiny_options(s, 6);
    rest.resume_dir = (dir / "half").string();
    rest.save_dir = (dir / "resumed").string();
    exec::ReplayResult c = exec::replay(s, rest);
    INFO(c.error);
    REQUIRE(c.ok);
    CHECK(c.first_step == 3);
    REQUIRE(c.losses.size() == 3);
    for (int i = 0; i < 3; ++i) {
      CHECK(b.losses[i] == a.losses[i]);
      CHECK(c.losses[i] == a.losses[i + 3]);  // exactly: the same arithmetic in the same order
    }
    for (int r = 0; r < s.header.world_size; ++r) {
      const std::string f = "rank" + std::to_string(r) + ".bin";
      std::string x = slurp(dir / "straight" / f), y = slurp(dir / "resumed" / f);
      CHECK(!x.empty());
      CHECK(x == y);
    }
    CHECK(slurp(dir / "straight" / "manifest.json") == slurp(dir / "resumed" / "manifest.json"));
  }
}

TEST_CASE("exec checkpoint: resuming with the wrong run is refused, naming what differs") {
  Schedule s = fsdp2();
  auto dir = fresh_dir("ckpt-foreign");
  exec::ReplayOptions o = tiny_options(s, 4);
  o.stop_after = 2;
  o.save_dir = (dir / "c").string();
  REQUIRE(exec::replay(s, o).ok);

  auto resume = [&](const Schedule& sched, exec::ReplayOptions opt) {
    opt.resume_dir = (dir / "c").string();
    exec::ReplayResult r = exec::replay(sched, opt);
    CHECK_FALSE(r.ok);
    return r.error;
  };
  GenOptions g;
  g.dp = 2, g.layers = 2, g.microbatches = 3;
  Schedule other = generate("fsdp", g);
  CHECK(resume(other, tiny_options(other, 4)).find("another schedule") != std::string::npos);
  exec::ReplayOptions m = tiny_options(s, 4);
  m.model.dim = 16;
  CHECK(resume(s, m).find("another model") != std::string::npos);
  exec::ReplayOptions seed = tiny_options(s, 4);
  seed.seed = 99;
  CHECK(resume(s, seed).find("seed 1, not 99") != std::string::npos);
  CHECK(resume(s, tiny_options(s, 8)).find("pass --steps 4") != std::string::npos);
  exec::ReplayOptions lr = tiny_options(s, 4);
  lr.optimizer.lr = 5e-3f;
  CHECK(resume(s, lr).find("optimizer settings") != std::string::npos);

  // a damaged rank file is caught by its hash
  {
    std::fstream f(dir / "c" / "rank1.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  CHECK(resume(s, tiny_options(s, 4)).find("corrupt") != std::string::npos);
  CHECK(resume(s, tiny_options(s, 4)).find("rank1.bin") != std::string::npos);
  exec::ReplayOptions missing = tiny_options(s, 4);
  missing.resume_dir = (dir / "nowhere").string();
  exec::ReplayResult r = exec::replay(s, missing);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("manifest.json") != std::string::npos);
}
