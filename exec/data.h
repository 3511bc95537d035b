// Training text as byte-level tokens (vocabulary 256, as nanoGPT's character-level runs): one or more files
// memory-mapped and read as one stream, split deterministically into training (the first 90%) and
// validation (the rest) tokens.
//
// Microbatch b of step s is the same tokens whichever rank reads it: its sequence i is the seq+1 tokens
// starting at ((s·M + b)·microbatch_size + i)·seq, modulo the training tokens (M microbatches per step),
// so consecutive sequences tile the training text in order; inputs are the first seq tokens, targets the
// last seq (the next byte of each input).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "exec/model_config.h"

namespace trainsim::exec {

/// Thrown for a corpus that cannot be used (missing, unreadable, too short), naming the file.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Memory-mapped byte corpus. Movable, not copyable; read-only and safe to share between threads.
class TokenData {
 public:
  /// Maps `files` in the given order as one stream. Throws DataError naming a file that cannot be opened
  /// or mapped, or when the stream is empty.
  explicit TokenData(std::vector<std::string> files);
  TokenData(TokenData&&) noexcept;
  TokenData& operator=(TokenData&&) noexcept;
  ~TokenData();

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
  /// Inputs and targets of validation sequence group `index` (microbatch_size sequences from the
  /// validation split, tiled in order).
  void validation_batch(const ModelConfig& model, long index, int* tokens, int* targets) const;
  /// "3,093,912 bytes from 37 files (2,784,520 training, 309,392 validation)".
  std::string describe() const;

 private:
  struct Mapping;
  void sequence(long start, int len, int* tokens, int* targets) const;
  std::vector<std::string> files_;
  std::vector<std::unique_ptr<Mapping>> maps_;
  std::vector<long> offsets_;  // stream offset of each file
  long size_ = 0, train_ = 0;
};

}  // namespace trainsim::exec
