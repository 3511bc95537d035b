// Errors the simulator reports. Every message names the rank, the op and where the op came from.
#pragma once

#include <stdexcept>
#include <string>

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

struct Op;
/// The error about one op, in the form every such error takes: "rank R: <the op> (<file:line>): <what>"
/// (the where part only when the op has one). Defined in sim/op.cpp.
SimError op_error(const Op& op, const std::string& what);

}  // namespace trainsim
