// Training text as byte-level tokens (vocabulary 256, as nanoGPT's character-level runs): one or more files
// read into memory once, in order, as one stream, split deterministically into training (the first 90%)
// and validation (the rest) tokens.
//
// The corpus is read, not memory-mapped: a file truncated or rewritten while a replay runs cannot end the
// process (a mapped page that is gone raises SIGBUS) or change its tokens half-way. It is hashed as it is
// read (SHA-256 of each file and of the stream), so that a checkpoint and the processes of a job can tell
// that they train on the same bytes, not only on files of the same names and sizes.
//
// Microbatch b of step s is the same tokens whichever rank reads it: its sequence i is the seq+1 tokens
// starting at ((s·M + b)·microbatch_size + i)·seq modulo (training tokens − seq − 1) (M microbatches per step),
// so consecutive sequences tile the training text in order; inputs are the first seq tokens, targets the
// last seq (the next byte of each input).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/model_config.h"

namespace trainsim::exec {

/// Thrown for a corpus that cannot be used (missing, unreadable, not a regular file, too large, too short),
/// naming the file.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Largest corpus, in bytes, all files together (4 GiB): it is held in memory.
inline constexpr std::size_t kMaxCorpusBytes = std::size_t{4} << 30;

/// A byte corpus held in memory. Movable, not copyable; read-only and safe to share between threads.
class TokenData {
 public:
  /// Reads `files` in the given order as one stream. Throws DataError naming a file that cannot be read
  /// or is not a regular file (exec/file_io.h), when the files hold more than `limit` bytes together, or
  /// when the stream is empty.
  explicit TokenData(std::vector<std::string> files, std::size_t limit = kMaxCorpusBytes);
  TokenData(TokenData&&) noexcept = default;
  TokenData& operator=(TokenData&&) noexcept = default;
  TokenData(const TokenData&) = delete;
  TokenData& operator=(const TokenData&) = delete;

  /// The default corpus: the text files of the Debian `fortunes` package (/usr/share/games/fortunes, every
  /// regular file without the index suffixes .dat and .u8), sorted by name. Throws DataError, saying to
  /// install `fortunes` or pass --data, when there is none.
  static std::vector<std::string> default_files();

  const std::vector<std::string>& files() const { return files_; }
  /// Bytes (tokens) in the stream.
  long size() const { return size_; }
  /// Tokens of the training split (the first 90%).
  long train_size() const { return train_; }
  /// Token i of the stream (0 <= i < size()).
  int token(long i) const;
  /// Checks that a sequence of seq+1 tokens fits in each split. Throws DataError.
  void check_fits(const ModelConfig& model) const;
  /// Inputs and targets of microbatch `b` of step `step` (M = `microbatches` per step), each
  /// microbatch_size·seq int32 values, sequence-major.
  void microbatch(const ModelConfig& model, long step, int microbatches, int b, int* tokens, int* targets) const;
  /// Inputs and targets of validation sequences first .. first+count-1, each seq values, sequence-major:
  /// sequence g is the seq+1 tokens starting at train_size() + (g·seq modulo (validation tokens − seq − 1)),
  /// so consecutive sequences tile the held-out split in order (the same sequences whatever the microbatches).
  void validation_sequences(const ModelConfig& model, long first, int count, int* tokens, int* targets) const;
  /// "3,093,912 bytes from 37 files (2,784,520 training, 309,392 validation)".
  std::string describe() const;
  /// SHA-256 of the whole stream, 64 lowercase hex digits.
  const std::string& sha256() const { return sha256_; }
  /// What identifies the corpus in a checkpoint's manifest and between the processes of a job:
  /// {"bytes": N, "sha256": "<stream>", "files": [{"path": P, "bytes": n, "sha256": "<file>"}, ...]}, the paths
  /// as given (bytes that are not UTF-8 replaced by U+FFFD, so that the JSON can be written).
  nlohmann::json identity() const;

 private:
  void sequence(long start, int len, int* tokens, int* targets) const;
  std::vector<std::string> files_;
  std::vector<std::size_t> file_bytes_;
  std::vector<std::string> file_sha256_;
  std::string bytes_;  // the stream
  std::string sha256_;
  long size_ = 0, train_ = 0;
};

}  // namespace trainsim::exec
