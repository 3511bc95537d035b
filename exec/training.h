// A whole replay job (DESIGN §5): checks the schedule in the simulator, plans it, trains the model for the
// requested steps with one thread per rank on a local backend (or this process's rank only, when every rank
// is its own process: ReplayOptions::join), reports the loss of every step with the
// measured timeline and memory, optionally saves or resumes a checkpoint, and with `check` trains the
// single-device reference (exec/reference.h) and compares losses and final weights.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "exec/model_config.h"
#include "exec/rank_executor.h"
#include "exec/optimizer.h"
#include "exec/process_group.h"
#include "schedules/schedule.h"
#include "sim/trace.h"

namespace trainsim::exec {

/// Settings of a replay.
struct ReplayOptions {
  std::string backend = "cpu";
  ModelConfig model;
  OptimizerConfig optimizer;
  bool clip_required = false;  ///< the user asked for clipping: a schedule that cannot clip is an error
  int steps = 20;              ///< training steps; the learning-rate schedule's length
  int stop_after = 0;          ///< stop after this many steps in all (0: run to `steps`), e.g. to save half-way
  std::uint64_t seed = 1;      ///< initialisation seed
  std::vector<std::string> data_files;  ///< the corpus; empty: the default (exec/data.h)
  bool check = false;          ///< also train the single-device reference and compare
  double tolerance = 1e-5;     ///< largest accepted relative difference of losses and weights (fp32)
  std::string save_dir;        ///< write a checkpoint here at the end
  std::string resume_dir;      ///< continue from this checkpoint
  double timeout_seconds = 300;  ///< longest wait of any communication before the job fails
  /// Measured steps kept in ReplayResult::steps: the last `trace_steps` steps, but never the run's first step
  /// when more than one step runs (it warms up the caches and the allocator). At least 1.
  int trace_steps = 1;
  std::string schedule_name;   ///< where the schedule came from (messages, checkpoint manifest)
  /// Evaluate the model on the validation split after every `eval_every` steps and after the last (0: never):
  /// the mean loss over validation sequences 0 .. eval_sequences-1 (exec/whole_model.h validation_loss), on
  /// the whole model put together from the ranks' weights, so the same sequences on every rank layout.
  int eval_every = 0;
  int eval_sequences = 32;     ///< validation sequences per evaluation, at least 1
  /// Activation recomputation (exec/model.h ModelContext::recompute): less memory, more time, the same bits.
  hw::Recompute recompute = hw::Recompute::None;
  FaultInjection fault;        ///< tests only
  /// Set when every rank is its own process: called once the run is planned, with what every rank must agree
  /// on, it meets the other processes (exec/dist/rendezvous.h) and returns this process's group; this
  /// process then runs its rank only, and rank 0 collects the results. May throw (the replay fails with
  /// its message). Empty: every rank runs in this process.
  std::function<std::unique_ptr<ProcessGroup>(const JobIdentity&)> join;
};

/// Progress after each step.
struct StepReport {
  int step = 0;             ///< 0-based
  int steps = 0;            ///< of this many
  double loss = 0;          ///< mean over the step's tokens
  /// The MoE load-balancing loss (ModelConfig::aux_loss_coeff): the sum over the MoE blocks of each one's, mean over
  /// the step's microbatches (what the objective adds to `loss`; α times the MoE blocks at perfect balance); 0
  /// without it.
  double aux_loss = 0;
  double learning_rate = 0; ///< the step's AdamW learning rate (warmup, cosine decay: exec/optimizer.h)
  /// The global L2 norm of the step's gradient (every parameter, the full-batch mean's), before clipping.
  double grad_norm = 0;
  /// What clipping multiplied the gradient by: min(1, max_norm / (grad_norm + 1e-6)) as
  /// torch.nn.utils.clip_grad_norm_; 1 when clipping is off.
  double clip_coefficient = 1;
  double seconds = 0;       ///< wall time of the step (from the end of the one before, evaluation excluded)
  double tokens_per_s = 0;  ///< of the step
  std::vector<std::size_t> peak_bytes;  ///< per rank: the most bytes its device allocator had out during the step
  bool evaluated = false;   ///< the model was evaluated after this step (ReplayOptions::eval_every)
  double validation_loss = 0;  ///< when evaluated: the mean loss over the validation sequences
};

/// One evaluation on the validation split.
struct Evaluation {
  int step = 0;        ///< after this many steps in all (1-based: after step 5 of 20 is 5)
  double loss = 0;     ///< mean loss over the validation sequences
  double seconds = 0;  ///< wall time it took (not counted in the steps' times)
};

/// Outcome of a replay. `ok` is false when anything failed: the error says what, naming the rank and op.
struct ReplayResult {
  bool ok = false;
  std::string error;
  /// This process reports the job: always, but on a process other than rank 0 of a multi-process job, whose
  /// result holds `ok` and `error` only (the job's outcome, as rank 0 decided it).
  bool reporting = true;
  int first_step = 0;                   ///< 0, or the checkpoint's step when resuming
  std::vector<double> losses;           ///< one per step run
  std::vector<double> aux_losses;       ///< with the MoE load-balancing loss: StepReport::aux_loss, one per step run
  // One per step run, as StepReport has them:
  std::vector<double> learning_rates, grad_norms, clip_coefficients, step_seconds, step_tokens_per_s;
  std::vector<std::vector<std::size_t>> step_peak_bytes;  ///< [step][rank]
  std::vector<Evaluation> evaluations;  ///< in order (ReplayOptions::eval_every)
  double tokens_per_s = 0;              ///< over the whole run
  double seconds = 0;                   ///< wall time of the steps (evaluations excluded)
  long tokens_per_step = 0;
  std::vector<std::size_t> peak_bytes;  ///< per rank: the most bytes the rank's device had allocated
  std::vector<std::size_t> schedule_tensor_bytes;  ///< per rank: the most bytes the schedule's tensors hold at once (program order)
  bool clip = false;                    ///< clipping by the global norm ran
  std::string clip_note;                ///< when it did not: "off (--grad-clip 0)" or "off: " and why (ReplayPlan::clip_note)
  Trace trace;                          ///< the last step as measured (host clock, bytes)
  std::vector<StepTrace> steps;         ///< the last ReplayOptions::trace_steps steps as measured, in order
  std::string model_description, data_description;
  // With check:
  bool checked = false;
  std::vector<double> reference_losses;  ///< the reference's losses of the same steps
  std::vector<double> reference_aux_losses;  ///< and its load-balancing losses (compared as the losses are)
  double max_rel_diff_loss = 0;          ///< max over steps of |loss − ref| / |ref|, the aux losses' too
  double max_rel_diff_weights = 0;       ///< ‖w − ref‖₂ / ‖ref‖₂ over all the model's parameters
  std::string worst_parameter;           ///< the parameter tensor with the largest relative difference
  double worst_parameter_rel_diff = 0;   ///< its ‖w − ref‖₂ / ‖ref‖₂ (reported, not a criterion: see compare())
  bool replicas_identical = true;        ///< ranks holding copies of the same weights hold the same bits
  /// Mixture of Experts: the first step (1-based) whose routing differs from single-device training's, 0 when
  /// none does. A token whose two closest router logits are within the replay's rounding (its sums run in another
  /// order) can go to another expert; from that step the runs are different trajectories, so only the losses of
  /// the steps before it are compared, and not the final weights (docs/executor.md, "Mixture of Experts").
  int routing_diverged_step = 0;
  int routing_block = 0, routing_microbatch = 0;  ///< where first: the MoE block and the microbatch
  double routing_margin = 0;  ///< the smallest relative router margin of that microbatch's tokens (exec/moe.h)
  /// In that step: the microbatches whose routing differs, and the (token, expert) pairs moved in each one's first
  /// MoE block that differs (half the L1 distance of the experts' counts). Rounding flips a near-tie token's k-th
  /// expert, one or two of a microbatch's; more than kRoutingFlipsPerMicrobatch per microbatch, or a first such
  /// microbatch without a token within kRoutingRoundingMargin tolerances of a tie, is a wrong result, and the
  /// check fails.
  int routing_microbatches = 0;
  long routing_moved = 0;
};

/// The (token, expert) pairs per microbatch a rounding difference may move where the routing first differs.
inline constexpr int kRoutingFlipsPerMicrobatch = 2;
/// The largest relative router margin (exec/moe.h: the smallest, over the microbatch's tokens, of the gap between
/// a token's k-th and next logit over its largest logit), in units of the check's tolerance, at which rounding can
/// move a token: a replay within the tolerance (1e-5) has logits within about that of one device's, so a
/// microbatch whose every token is further from a tie than 100 times it (1e-3), and is routed otherwise, is a
/// wrong result, not a near-tie.
inline constexpr double kRoutingRoundingMargin = 100;

/// Runs the replay. Never throws for a bad schedule, model, corpus or checkpoint: the problem goes into
/// the result. `progress` (may be empty) is called after every step.
ReplayResult replay(const Schedule& schedule, const ReplayOptions& options,
                    const std::function<void(const StepReport&)>& progress = {});

}  // namespace trainsim::exec
