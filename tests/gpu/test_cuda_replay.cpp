// Replays on the "cuda" backend (logical ranks on one GPU, the device-local communicator) train exactly
// like one device: losses and final weights within 1e-5 relative of the single-device reference (fp32),
// for pipeline, data-parallel and sharded schedules, and tensor-parallel ones (the vocabulary-parallel kernels,
// the TP group's reductions inside compute ops on the device-local communicator, sequence parallelism's
// reduce-scatters and all-gathers). NOT YET RUN ON A GPU.
#include <doctest/doctest.h>

#include <cmath>

#include "exec/training.h"
#include "schedules/generators.h"

using namespace trainsim;

namespace {

// `heads`: 4 lets TP 4 split the attention.
exec::ReplayResult on_cuda(const Schedule& s, const std::string& what, int heads = 2) {
  INFO(what);
  exec::ReplayOptions o;
  o.backend = "cuda";
  o.model = exec::preset("tiny");
  o.model.blocks = s.header.layers;
  o.model.heads = heads;
  o.steps = 3;
  o.data_files = {std::string(TRAINSIM_SOURCE_DIR) + "/tests/data/corpus.txt"};
  o.timeout_seconds = 60;
  o.check = true;
  exec::ReplayResult r = exec::replay(s, o);
  INFO(r.error);
  CHECK(r.ok);
  CHECK(r.checked);
  CHECK(r.max_rel_diff_loss <= 1e-5);
  CHECK(r.max_rel_diff_weights <= 1e-5);
  CHECK(r.replicas_identical);
  for (double l : r.losses) CHECK(std::isfinite(l));
  return r;
}

Schedule gen(const std::string& kind, int stages, int microbatches, int dp = 1, int layers = 0) {
  GenOptions g;
  g.stages = stages, g.microbatches = microbatches, g.dp = dp, g.layers = layers;
  return generate(kind, g);
}

}  // namespace

TEST_CASE("cuda replay: schedules with logical ranks on one GPU equal one device") {
  on_cuda(gen("1f1b", 4, 6), "1f1b p=4");
  on_cuda(gen("zb-h1", 2, 3), "zb-h1 p=2");
  on_cuda(gen("ddp", 1, 2, 2, 2), "ddp dp=2");
  on_cuda(gen("fsdp", 1, 2, 3, 3), "fsdp dp=3");
  on_cuda(gen("pp-fsdp", 2, 4, 2), "pp-fsdp stages=2 dp=2");
}

Schedule gen_tp(const std::string& kind, int tp, int pp, int dp, int zero, bool sp) {
  GenOptions g;
  g.tp = tp, g.pp = pp, g.dp = dp, g.zero = zero, g.sequence_parallel = sp, g.microbatches = 2;
  return generate(kind, g);
}

TEST_CASE("cuda replay: tensor-parallel schedules (with and without sequence parallelism) equal one device") {
  on_cuda(gen_tp("tp", 2, 1, 1, 0, false), "gen tp --tp 2", 4);
  on_cuda(gen_tp("tp", 4, 1, 1, 0, false), "gen tp --tp 4", 4);
  on_cuda(gen_tp("tp", 2, 1, 1, 0, true), "gen tp --tp 2 --sp", 4);
  on_cuda(gen_tp("3d", 2, 2, 2, 0, true), "gen 3d --tp 2 --pp 2 --dp 2 --sp", 4);
  on_cuda(gen_tp("3d", 2, 2, 2, 3, true), "gen 3d --tp 2 --pp 2 --dp 2 --sp --zero 3", 4);
}

TEST_CASE("cuda replay: Mixture-of-Experts schedules (expert parallelism, all-to-alls) equal one device") {
  for (int ep : {2, 4}) {
    GenOptions g;
    g.dp = 4, g.ep = ep, g.layers = 2, g.microbatches = 2;
    const Schedule s = generate("ep", g);
    exec::ReplayOptions o;
    o.backend = "cuda";
    o.model = exec::preset("tiny-moe");
    o.steps = 3;
    o.data_files = {std::string(TRAINSIM_SOURCE_DIR) + "/tests/data/corpus.txt"};
    o.timeout_seconds = 60;
    o.check = true;
    const exec::ReplayResult r = exec::replay(s, o);
    CAPTURE(ep);
    INFO(r.error);
    CHECK(r.ok);
    CHECK(r.max_rel_diff_loss <= 1e-5);
    if (!r.routing_diverged_step) CHECK(r.max_rel_diff_weights <= 1e-5);
  }
}

TEST_CASE("cuda replay: the measured timeline and memory come from the GPU") {
  exec::ReplayResult r = on_cuda(gen("gpipe", 2, 4), "gpipe p=2");
  CHECK(r.peak_bytes.size() == 2);
  for (std::size_t b : r.peak_bytes) CHECK(b > 0);
  CHECK(r.trace.ranks.size() == 2);
}
