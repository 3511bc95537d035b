// A rank program written against the simulator API, outside the puzzles: 1F1B on two pipeline stages with
// three microbatches, as C++ coroutines (one per rank), run in the discrete-event World with the puzzle
// cost model and recorded to a .sched file (schedules/recorder.h).
//
//   cmake --build build --target example_one_f_one_b
//   ./build/example_one_f_one_b 1f1b-coroutines.sched && ./build/trainsim sim 1f1b-coroutines.sched --svg 1f1b.svg
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "puzzles/model.h"           // Model: one rank's stores and ops (forward, backward, pass_to, receive...)
#include "schedules/recorder.h"      // ScheduleRecorder: turns the run into a Schedule
#include "schedules/text_format.h"   // print_schedule: the .sched text
#include "sim/cost_model.h"          // PuzzleCostModel: forward/backward one step per batch, a pass 0.2
#include "sim/world.h"               // World: the simulated cluster that runs one coroutine per rank

using namespace trainsim;
using puzzles::Model;

namespace {

constexpr int kStages = 2, kMicrobatches = 3;

// Stage `model.rank()` owns layer `model.rank()`. Warm-up: as many forwards as stages ahead; then one
// backward, one forward; finally the remaining backwards. Each stage keeps at most kStages microbatches'
// activations, where GPipe keeps all of them.
Task one_f_one_b(Model& model) {
  auto& [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
  const int l = model.rank();
  const bool first = l == 0, last = l == kStages - 1;
  std::tie(weights[l], opt_states[l]) = model.load_weights(l);

  // Forward of microbatch mb: take the input (from the data or the previous stage), pass the output on.
  auto forward = [&](int mb) -> Task {
    if (first) activations[{l, mb}] = model.get_activation({mb});
    else activations[{l, mb}] = co_await model.receive();
    activations[{l + 1, mb}] = model.forward(l, activations[{l, mb}], weights[l]);
    if (!last) {
      co_await model.pass_to(l + 1, activations[{l + 1, mb}]);
      activations.erase({l + 1, mb});  // sent: this stage no longer needs it
    }
  };
  // Backward of microbatch mb: take the output's grad (the loss, or the next stage), accumulate the weight
  // grad, pass the input's grad back, free what this microbatch held.
  auto backward = [&](int mb) -> Task {
    if (last) {
      grad_activations[{l + 1, mb}] = model.loss(activations[{l + 1, mb}]);
      activations.erase({l + 1, mb});
    } else {
      grad_activations[{l + 1, mb}] = co_await model.receive();
    }
    std::tie(grad_weights[{l, mb}], grad_activations[{l, mb}]) =
        model.backward(l, activations[{l, mb}], grad_activations[{l + 1, mb}], weights[l]);
    if (mb == 0) grad_weights[l] = grad_weights[{l, mb}];
    else grad_weights[l] = grad_weights[l] + grad_weights[{l, mb}];  // gradient accumulation
    grad_weights.erase({l, mb});
    grad_activations.erase({l + 1, mb});
    activations.erase({l, mb});
    if (!first) co_await model.pass_to(l - 1, grad_activations[{l, mb}]);
    grad_activations.erase({l, mb});
  };

  const int warmup = kStages - l;  // stage 0 runs ahead by one forward per later stage
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup && next_forward < kMicrobatches; ++next_forward) co_await forward(next_forward);
  while (next_backward < kMicrobatches) {
    co_await backward(next_backward++);
    if (next_forward < kMicrobatches) co_await forward(next_forward++);
  }
  std::tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
  model.set_final_weight(l, weights[l]);
}

}  // namespace

int main(int argc, char** argv) {
  PuzzleCostModel cost;
  WorldOptions options;
  options.world_size = kStages;
  options.layers = kStages;
  options.batches = kMicrobatches;
  ScheduleHeader header;
  header.world_size = kStages;
  header.layers = kStages;
  header.microbatches = kMicrobatches;
  header.cost_model = cost.name();
  header.p2p = options.p2p;
  ScheduleRecorder recorder(header);
  std::vector<std::unique_ptr<Model>> models;
  try {
    World world(options, cost);
    world.set_op_observer([&recorder](const Op& op) { recorder.on_op(op); });  // every timed op
    for (int rank = 0; rank < kStages; ++rank) {
      models.push_back(std::make_unique<Model>(Rank(world, rank), kStages, kMicrobatches));
      models.back()->set_store_observer(  // every change of what the rank holds (its memory)
          [&recorder, rank](const Tensor* before, const Tensor* after) { recorder.on_store(rank, before, after); });
      world.spawn(rank, one_f_one_b(*models.back()));
    }
    world.run();
    std::vector<Model*> ranks;
    for (auto& m : models) ranks.push_back(m.get());
    Model::check(ranks);  // every layer updated exactly once
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example_one_f_one_b: %s\n", e.what());
    return 1;
  }
  Schedule schedule = recorder.finish();
  schedule.header.stage_map = {0, 1};
  std::string text = print_schedule(schedule);
  std::FILE* out = argc > 1 ? std::fopen(argv[1], "wb") : stdout;
  if (!out) {
    std::perror(argv[1]);
    return 2;
  }
  std::fwrite(text.data(), 1, text.size(), out);
  return (argc > 1 ? std::fclose(out) : std::fflush(out)) == 0 ? 0 : 2;
}
