// Shared helper for the hardware-model tests: a generated schedule simulated on a hardware setting.
#pragma once

#include <string>

#include <doctest/doctest.h>

#include "hardware/setting.h"
#include "schedules/generators.h"
#include "schedules/hardware_sim.h"

namespace trainsim::testing {

/// The report of generator `kind` with options `o`, simulated on `hs` (rank by rank, no trace). Fails the test
/// when the schedule is invalid.
inline hw::StepReport simulate_generated(const std::string& kind, const GenOptions& o, const hw::HardwareSetting& hs) {
  auto source = generate_ranks(kind, o);
  source->header().cost_model = "hardware";
  source->header().hardware = hs;
  HardwareRun run = simulate_hardware(*source, false);
  INFO(run.result.error);
  REQUIRE(run.result.ok);
  REQUIRE(run.report);
  return *run.report;
}

/// An H100 SXM on nvlink8-ib400 running `model` at sequence length `seq` (the tests' usual machine).
inline hw::HardwareSetting h100_setting(hw::ModelSpec model, int seq) {
  hw::HardwareSetting hs;
  hs.model = std::move(model);
  hs.device = hw::device_preset("h100-sxm");
  hs.network = hw::network_preset("nvlink8-ib400");
  hs.seq = seq;
  return hs;
}

}  // namespace trainsim::testing
