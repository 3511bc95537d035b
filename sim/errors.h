// Errors the simulator reports. Every message names the rank, the op and where the op came from.
#pragma once

#include <stdexcept>

namespace trainsim {

/// Any failed check of a simulated run.
struct SimError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// No event is left while ranks are still blocked; the message lists each blocked rank, the op it waits
/// in, what it waits for, and the wait-for cycle.
struct DeadlockError : SimError {
  using SimError::SimError;
};
/// Members of a group called different collectives at the same position of their sequence.
struct CollectiveMismatchError : SimError {
  using SimError::SimError;
};
/// A rank's resident memory exceeded the limit when an op started.
struct MemoryLimitError : SimError {
  using SimError::SimError;
};

}  // namespace trainsim
