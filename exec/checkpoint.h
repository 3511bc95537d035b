// Checkpoints of a replay: each rank's carried state (its weights and optimizer state, exec/rank_executor.h)
// and a manifest naming what made them, so that a resumed run continues bit for bit and a checkpoint of
// another schedule, model, optimizer, seed or corpus is refused.
//
// Layout: DIR/manifest.json and DIR/rank<R>.bin. A rank file is "trainsim-state 1\n" then, per tensor,
// a line "<tensor> <bytes>\n" followed by the raw little-endian fp32 bytes. The manifest records the FNV-1a
// hash of every rank file, checked on load.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/tensor.h"

namespace trainsim::exec {

/// A checkpoint that cannot be written, read or used, naming the file and the reason.
struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One rank's state on the host: tensor -> fp32 values.
using HostState = std::map<Tensor, std::vector<float>>;

/// What identifies the run a checkpoint continues.
struct CheckpointInfo {
  int step = 0;                 ///< training steps completed
  int total_steps = 0;          ///< the learning-rate schedule's length
  std::string schedule_hash;    ///< hash of the canonical schedule text
  std::string schedule_name;    ///< where it came from (informational)
  int world_size = 0;
  nlohmann::json model, optimizer, data;
  std::uint64_t seed = 0;
};

/// 16 hex digits of FNV-1a 64 over `text`.
std::string fnv1a_hex(const std::string& text);

/// Writes the manifest and one file per rank into `dir` (created if needed). Throws CheckpointError.
void save_checkpoint(const std::string& dir, const CheckpointInfo& info, const std::vector<HostState>& ranks);
/// Reads the manifest. Throws CheckpointError naming the file when it is missing or malformed.
CheckpointInfo read_checkpoint_info(const std::string& dir);
/// Reads every rank's state, checking each file's hash. Throws CheckpointError.
std::vector<HostState> read_checkpoint_states(const std::string& dir, int world_size);
/// "" when `saved` can continue the run described by `now`, else what differs (schedule, world size, model,
/// optimizer, seed, data, total steps, or a checkpoint already at the end).
std::string checkpoint_mismatch(const CheckpointInfo& saved, const CheckpointInfo& now);

}  // namespace trainsim::exec
