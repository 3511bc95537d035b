// `trainsim replay --log FILE`: one row per training step, written as the run goes (flushed after each row, so
// `tail -f` follows it), for any plotting tool. The name's extension picks the format: `.csv` (a header row,
// then comma-separated numbers) or `.jsonl` (JSON lines: one object per line).
//
// Columns: step (1-based, counted from the run's start: a resumed run continues the count), loss (mean over the
// step's tokens, nats), lr (the step's learning rate), grad_norm (the global L2 norm of the gradient before
// clipping), clip_coef (what clipping multiplied it by; 1 without clipping), step_seconds (wall time),
// tokens_per_s, val_loss (the validation loss when the model was evaluated after the step; empty in CSV, absent
// in JSON lines otherwise), peak_bytes (per rank: the most bytes its device allocator had out in the step; CSV:
// peak_bytes_rank0, peak_bytes_rank1, ...). A value that is not finite (the gradient norm of a step whose
// update diverged) is "nan" or "inf" in CSV, null in JSON lines. A run that fails adds a last row in JSON lines,
// {"error": "..."} (a diverged run: "the gradient norm is not finite (NaN) in step 3 of 20, ...").
//
// A resumed run (--resume) continues its log, as TensorBoard and W&B resume do: the rows of the steps up to the
// checkpoint's are kept (a later row, from steps the checkpoint does not hold, and a failed run's error row go),
// and the resumed steps follow. A file that is not such a log (another format, another rank count) is replaced.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "exec/training.h"

namespace trainsim::apps {

/// A row kept from the log of the run a resumed run continues: what the loss plot draws of the steps before.
struct LoggedStep {
  int step = 0;  ///< 1-based
  double loss = 0, learning_rate = 0;
  bool evaluated = false;
  double validation_loss = 0;
};

/// An open log. Not copyable; closes the file when it goes.
class TrainingLog {
 public:
  /// Creates (replaces) `path` for a run of `ranks` ranks; for a run resumed after step `resumed_after` (> 0), keeps
  /// the rows of steps 1 .. resumed_after of the log already there (see the top of this file). Throws
  /// std::runtime_error "cannot write 'PATH': WHY".
  TrainingLog(const std::string& path, int ranks, int resumed_after = 0);
  /// The rows kept from before the resumed run, in step order (empty for a fresh run).
  const std::vector<LoggedStep>& earlier() const { return earlier_; }
  ~TrainingLog();
  TrainingLog(const TrainingLog&) = delete;
  TrainingLog& operator=(const TrainingLog&) = delete;

  /// Appends the row of one step and flushes. Throws std::runtime_error when the file cannot be written.
  void step(const exec::StepReport& rep);
  /// Notes that the run failed (JSON lines only: CSV has no place for words). Never throws.
  void error(const std::string& what);
  /// Closes the file. Throws std::runtime_error when the last bytes cannot be written.
  void close();

 private:
  void put(const std::string& line);
  std::string path_;
  std::FILE* file_ = nullptr;
  bool csv_ = false;
  int ranks_ = 0;
  std::vector<LoggedStep> earlier_;
};

}  // namespace trainsim::apps
