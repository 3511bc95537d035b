// Checkpoints of a replay: each rank's carried state (its weights and optimizer state, exec/rank_executor.h)
// and a manifest naming what made them, so that a resumed run continues bit for bit and a checkpoint of
// another schedule, model, optimizer, seed or corpus is refused, naming what differs.
//
// Layout (format version 2): DIR/manifest.json and one file per rank, DIR/rank<R>-<H>.bin, where <H> is the
// first 16 hex digits of the file's SHA-256. A rank file is "trainsim-state 1\n" then, per tensor, a line
// "<tensor> <bytes>\n" followed by the raw little-endian fp32 bytes. The manifest records every rank file's
// name, size and SHA-256, and its own SHA-256 (field "sha256", over the canonical JSON of the rest:
// nlohmann::json's dump() of the manifest without that field, keys sorted, no spaces), so that no byte of a
// checkpoint can change unnoticed. Every number in it is range-checked on reading.
//
// A save never destroys the checkpoint it replaces: at every instant DIR holds one complete checkpoint (or
// none, before the first save). The rank files of a save take new names (their content's hash: two saves
// that differ never share a name), each written to a temporary file, fsync'd and renamed; the directory
// is fsync'd; then the manifest goes the same way (DIR/.manifest.json.tmp, fsync, rename over
// manifest.json: the atomic step that switches from the old checkpoint to the new one), the directory is
// fsync'd again, and only then are the files of the previous save removed. Renaming files inside one
// directory is atomic on every POSIX file system, where swapping two directories is not (rename(2) does not
// replace a non-empty directory), so the directory the user named stays in place. A save that fails
// removes what it wrote and leaves the previous checkpoint as it was; the error names the file.
// The saver holds the directory's lock (flock), so two saves into one directory cannot mix.
#pragma once

#include <cstdint>
#include <functional>
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

/// The checkpoint format this trainsim writes and reads.
inline constexpr int kCheckpointVersion = 2;
/// Largest manifest read, in bytes (64 MiB: a manifest of the largest world, 131,072 ranks, is about 22 MiB).
inline constexpr std::size_t kMaxManifestBytes = std::size_t{64} << 20;

/// One rank's state on the host: tensor -> fp32 values.
using HostState = std::map<Tensor, std::vector<float>>;
/// What one rank's state must hold: tensor -> its size in bytes (from the replay's plan).
using StateLayout = std::map<Tensor, std::size_t>;

/// A rank's file as the manifest lists it.
struct RankFile {
  std::string name;    ///< "rank<R>-<first 16 hex digits of sha256>.bin", in the checkpoint's directory
  std::uint64_t bytes = 0;
  std::string sha256;  ///< 64 lowercase hex digits
};

/// What identifies the run a checkpoint continues.
struct CheckpointInfo {
  int step = 0;                 ///< training steps completed
  int total_steps = 0;          ///< the learning-rate schedule's length
  std::string schedule_hash;    ///< SHA-256 of the canonical schedule text (print_schedule)
  std::string schedule_name;    ///< where it came from (informational)
  int world_size = 0;
  nlohmann::json model, optimizer;
  nlohmann::json data;          ///< the corpus: TokenData::identity() (paths, sizes, SHA-256 of the bytes)
  std::uint64_t seed = 0;
  /// How the schedule splits the model (what sampling and export need to put the weights together without the
  /// schedule): its layers, and its stage layout's text (hardware/stage_layout.h; "" for the even split).
  /// 0 layers: not recorded (a checkpoint of an older trainsim).
  int layers = 0;
  std::string stage_layout;
  /// Expert parallelism: layer -> EP degree of the layers whose experts are in expert slices (ModelShapes'
  /// expert_parallel; empty without, and then not in the manifest).
  std::map<int, int> expert_parallel;
  std::vector<RankFile> rank_files;  ///< set by read_checkpoint_info(); save_checkpoint() ignores it
};

/// "" when every value of `ranks` is finite, else where the first NaN or infinity is: "rank 1's W3: NaN (element
/// 17)". A diverged run's state is neither saved nor read back (issue 38).
std::string first_non_finite(const std::vector<HostState>& ranks);

/// Writes a checkpoint of `ranks` (one state per rank) into `dir`, created if needed, replacing the one
/// there atomically (see the top of this file). Throws CheckpointError naming the file that could not be
/// written (a full disk, a permission, another process saving there), or a state that is not finite
/// (first_non_finite); the checkpoint that was in `dir` before is then intact.
void save_checkpoint(const std::string& dir, const CheckpointInfo& info, const std::vector<HostState>& ranks);

/// Reads and checks `dir/manifest.json`: a regular file of at most kMaxManifestBytes, format version 2,
/// its SHA-256 right, every field present, of its type and in range (step in [1, total_steps], world size in
/// [1, kMaxWorldSize], one rank file per rank with a well-formed name). Throws CheckpointError naming the
/// file and the field; a checkpoint of format version 1 (no hash on the manifest) is refused as such.
CheckpointInfo read_checkpoint_info(const std::string& dir);

/// Reads every rank's state of the checkpoint `info` (from read_checkpoint_info(dir)). `layouts[r]` is what
/// rank r's state must hold in this run: each file is read only when the manifest's size for it is the
/// size of that state, and never beyond it; regular files only; its SHA-256 must be the manifest's; it
/// must hold each tensor of the layout once, of its size, and nothing else, every value finite. Throws
/// CheckpointError naming the file, and the tensor where one is wrong.
std::vector<HostState> read_checkpoint_states(const std::string& dir, const CheckpointInfo& info,
                                              const std::vector<StateLayout>& layouts);

/// Every rank's state of the checkpoint `info` (from read_checkpoint_info(dir)) without a plan: each file read
/// (regular files only, at most the manifest's size for it), its SHA-256 checked against the manifest's, every
/// tensor it holds kept, each of the size `bytes_of` gives for it (what a model of the checkpoint's shapes says).
/// Throws CheckpointError naming the file, and the tensor whose size is wrong or that holds a NaN or an infinity.
std::vector<HostState> read_checkpoint_tensors(const std::string& dir, const CheckpointInfo& info,
                                               const std::function<std::size_t(const Tensor&)>& bytes_of);

/// "" when `saved` can continue the run described by `now`, else what differs (schedule, world size, model,
/// optimizer, seed, corpus, total steps, or a checkpoint already at the end). For the corpus, names the
/// file whose bytes differ, with both SHA-256s, when the files are the same but their content is not.
std::string checkpoint_mismatch(const CheckpointInfo& saved, const CheckpointInfo& now);

}  // namespace trainsim::exec
