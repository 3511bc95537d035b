// What the processes of a multi-process replay send rank 0 (exec/job_wire.h): a step's output and a rank's
// state round-trip bit for bit, and bytes that are not an encoded step or state (truncated, trailing bytes,
// a partial fp32 value, a tensor twice) are refused with an error instead of being read as something else.
#include <doctest/doctest.h>

#include <cstring>
#include <stdexcept>

#include "exec/job_wire.h"
#include "schedules/text_format.h"

using namespace trainsim;

namespace {

exec::StepOutput sample_step() {
  exec::StepOutput out;
  out.loss_sums = {1.5, -0.25, 3e10};
  out.timings = {exec::WorkTiming{3, 10, 20, 4096}, exec::WorkTiming{-1, 25, 30, 0}};
  out.grad_norm_sq = 0.75;
  out.aux_loss_sum = 0.0625;
  out.peak_bytes = 99;
  out.routing = {{1, 0, 0x1234567890abcdefull, {3, 0, 5}}, {2, 7, 42, {}, 1, 2}};
  return out;
}

exec::HostState sample_state() {
  exec::HostState s;
  s[parse_tensor("W0")] = {1.0f, 2.0f, -3.5f};
  s[parse_tensor("O1")] = {0.125f};
  return s;
}

}  // namespace

TEST_CASE("job wire: steps and states round-trip bit for bit") {
  std::size_t peak = 0;
  const exec::StepOutput back = exec::decode_step(exec::encode_step(sample_step(), 12345), peak);
  CHECK(peak == 12345);
  REQUIRE(back.loss_sums.size() == 3);
  CHECK(std::memcmp(back.loss_sums.data(), sample_step().loss_sums.data(), 3 * sizeof(double)) == 0);
  REQUIRE(back.timings.size() == 2);
  CHECK(back.timings[0].tag == 3);
  CHECK(back.timings[1].end_ns == 30);
  CHECK(back.grad_norm_sq == 0.75);
  CHECK(back.aux_loss_sum == 0.0625);
  CHECK(back.peak_bytes == 99);
  REQUIRE(back.routing.size() == 2);
  CHECK(back.routing[0].block == 1);
  CHECK(back.routing[0].hash == 0x1234567890abcdefull);
  CHECK(back.routing[0].counts == std::vector<int>{3, 0, 5});
  CHECK(back.routing[1].microbatch == 7);
  CHECK(back.routing[1].counts.empty());
  CHECK(back.routing[0].shard == 0);  // (the whole microbatch)
  CHECK(back.routing[0].shards == 1);
  CHECK(back.routing[1].shard == 1);  // (sequence shard 1 of 2: an MoE layer's TP slice)
  CHECK(back.routing[1].shards == 2);
  CHECK_FALSE(back.state.has_value());
  CHECK(exec::decode_state(exec::encode_state(sample_state())) == sample_state());
  // A step that carries the rank's state (to evaluate the model after it).
  exec::StepOutput with = sample_step();
  with.state = sample_state();
  const exec::StepOutput back2 = exec::decode_step(exec::encode_step(with, 1), peak);
  REQUIRE(back2.state.has_value());
  CHECK(*back2.state == sample_state());
  CHECK(back2.timings.size() == 2);
}

TEST_CASE("job wire: malformed steps and states are refused, not misread") {
  std::size_t peak = 0;
  const std::string step = exec::encode_step(sample_step(), 1);
  for (std::size_t cut : {std::size_t{0}, std::size_t{7}, step.size() / 2, step.size() - 1}) {
    CAPTURE(cut);
    CHECK_THROWS_AS(exec::decode_step(step.substr(0, cut), peak), std::runtime_error);
  }
  CHECK_THROWS_WITH(exec::decode_step(step + "x", peak), doctest::Contains("bytes after its end"));
  // A loss field that is not whole doubles: 8 bytes of peak, then a length of 12.
  std::string odd(8, '\0');
  const std::uint64_t twelve = 12, none = 0;
  odd.append(reinterpret_cast<const char*>(&twelve), 8).append(12, '\0').append(reinterpret_cast<const char*>(&none), 8);
  CHECK_THROWS_WITH(exec::decode_step(odd, peak), doctest::Contains("its losses"));
  // A count of timings or of routing records far beyond the bytes that follow is refused before any is read
  // (an empty step ends with the two counts).
  std::string huge = exec::encode_step(exec::StepOutput{}, 1);
  const std::uint64_t many = ~std::uint64_t{0};
  std::memcpy(huge.data() + huge.size() - 16, &many, 8);
  CHECK_THROWS_WITH(exec::decode_step(huge, peak), doctest::Contains("truncated"));
  huge = exec::encode_step(exec::StepOutput{}, 1);
  std::memcpy(huge.data() + huge.size() - 8, &many, 8);
  CHECK_THROWS_WITH(exec::decode_step(huge, peak), doctest::Contains("truncated (its routing)"));
  // A routing record of a sequence shard that does not exist (shard 2 of 2).
  exec::StepOutput bad_shard;
  bad_shard.routing = {{1, 0, 5, {}, 1, 2}};
  std::string shard_bytes = exec::encode_step(bad_shard, 1);
  const std::int32_t two_ = 2;
  std::memcpy(shard_bytes.data() + shard_bytes.size() - 8 - 8, &two_, 4);  // (shard, shards, then the counts' length)
  CHECK_THROWS_WITH(exec::decode_step(shard_bytes, peak), doctest::Contains("its routing's sequence shard"));

  const std::string state = exec::encode_state(sample_state());
  CHECK_THROWS_AS(exec::decode_state(state.substr(0, state.size() - 3)), std::runtime_error);
  CHECK_THROWS_WITH(exec::decode_state(state + "\x01"), doctest::Contains("bytes after its end"));
  // The same tensor twice: the second copy would silently replace the first.
  exec::HostState one;
  one[parse_tensor("W0")] = {1.0f};
  std::string twice = exec::encode_state(one);
  const std::string entry = twice.substr(8);
  const std::uint64_t two = 2;
  twice = std::string(reinterpret_cast<const char*>(&two), 8) + entry + entry;
  CHECK_THROWS_WITH(exec::decode_state(twice), doctest::Contains("holds W0 twice"));
}
