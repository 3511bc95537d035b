// What the processes of a multi-process replay send rank 0 (exec/training.cpp): each step's output with the
// rank's peak memory, and the rank's final state, as bytes for ProcessGroup::gather(). Host byte order: the
// processes of a job run the same build (the rendezvous checks the protocol) on machines of one kind.
#pragma once

#include <cstddef>
#include <string>

#include "exec/checkpoint.h"
#include "exec/rank_executor.h"

namespace trainsim::exec {

/// A step's output (its loss sums, gradient-norm part, the step's peak, the state when it carries one, the
/// timings) and the rank's peak allocated bytes so far.
std::string encode_step(const StepOutput& out, std::size_t peak_bytes);
/// The inverse; throws std::runtime_error for bytes that are not an encoded step.
StepOutput decode_step(const std::string& bytes, std::size_t& peak_bytes);

std::string encode_state(const HostState& state);
/// The inverse; throws std::runtime_error for bytes that are not an encoded state.
HostState decode_state(const std::string& bytes);

}  // namespace trainsim::exec
