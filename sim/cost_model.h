// Cost models: how long an op takes and how much memory a tensor holds (DESIGN §2).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sim/op.h"
#include "sim/tensor.h"
#include "sim/time.h"

namespace trainsim {

/// Prices ops and tensors for the simulator.
class CostModel {
 public:
  virtual ~CostModel() = default;
  /// Short name written in schedule headers and reports ("puzzle").
  virtual std::string name() const = 0;
  /// Duration of a timed op once it starts; for a collective, once every member has arrived.
  /// `group_size` is the number of members of a collective (1 otherwise).
  virtual Time duration(const Op& op, int group_size) const = 0;
  /// Memory held by one resident tensor, in memory_unit().
  virtual double memory(const Tensor& t) const = 0;
  /// Memory held by a tensor resident on `rank` (-1: unknown). Models whose sizes depend on where a tensor
  /// sits (the hardware model: a forward's saved activations live on the rank that ran it) override this.
  virtual double memory(const Tensor& t, int rank) const {
    (void)rank;
    return memory(t);
  }
  /// Unit of memory(): "units" for the puzzles, "bytes" for hardware models.
  virtual std::string memory_unit() const = 0;
  /// Memory an op allocates inside itself while it runs, beyond the tensors it reads and writes (its workspace:
  /// under the hardware model the loss's fp32 log-softmax and its grad, a fully recomputed block's activations;
  /// hardware/cost_model.h), in memory_unit(). The simulators count it on the op's rank as the op starts, on top
  /// of what is resident then (the op's memory sample, its peak and the memory limit). 0 for every op of the
  /// puzzle and unit models.
  virtual double workspace(const Op& op) const {
    (void)op;
    return 0;
  }
  /// The communication an op runs inside itself, part of its duration(), in Time units: under the hardware
  /// model the TP collectives inside a compute op (hardware/cost_model.h), which a timeline can draw inside the
  /// op; 0 for every op of the other models.
  virtual Time inner_comm(const Op& op) const {
    (void)op;
    return 0;
  }
  /// What the model learns of rank `rank` from its ops before it prices them: nothing, but for a model whose
  /// prices on a rank depend on the rank's other ops (the hardware model: the TP degree of each forward the rank
  /// runs, its sequence parallelism; hardware/cost_model.h). make_schedule_cost_model calls it for every rank of
  /// a schedule held whole; the stream engine, for a source that makes each rank's ops when asked, with each
  /// rank's ops just before it issues them. Throws std::invalid_argument for ops the model cannot price.
  virtual void prepare_rank(int rank, const std::vector<Op>& ops) {
    (void)rank, (void)ops;
  }

  /// Mixture of Experts: the relative token load of each expert slice (ScheduleHeader::expert_load; empty:
  /// balanced). Throws std::invalid_argument for a load that is not finite and above 0.
  void set_expert_load(std::vector<double> load);
  /// The share of the balanced tokens that expert slice `index` of `count` receives: load[index] / mean(load),
  /// 1 when balanced or when the loads are given for another EP degree. The puzzle and unit models scale the
  /// slice's compute and its tokens' memory by it; unitless.
  double expert_load_factor(int index, int count) const;

 protected:
  /// The time of an expert slice's compute relative to a dense pass of the same batches (the puzzle and unit
  /// models): its tokens are the whole EP group's batches, 1/e of them with balanced routing, times the slice's
  /// expert_load_factor; 1 for any other op.
  double expert_share(const Op& op) const;

 private:
  std::vector<double> expert_load_;  // normalised to mean 1
};

/// The LLM Training Puzzles' own costs, reproduced exactly (srush/LLM-Training-Puzzles lib.py):
/// forward and backward take one step per batch; update 0.5; loss 0; all-reduce, all-gather and
/// reduce-scatter 0.3 after every member arrived; a pass 0.2 on the sender and 0.2 on the receiver.
/// Memory: weight, optimizer state and weight grad 512·512 units times the fraction of shards held;
/// activation and activation grad 512·256 units per batch. One step is one simulated second.
/// Tensor parallelism (our addition, for the tensor-parallel puzzle): a TP slice of t holds 1/t of that
/// memory (a partial sum is a whole activation), and a forward or backward with a TP slice of the weight
/// does 1/t of the layer's work, 1/t of a step per batch.
class PuzzleCostModel final : public CostModel {
 public:
  static constexpr double kHidden = 512;
  static constexpr double kLength = 256;
  std::string name() const override { return "puzzle"; }
  Time duration(const Op& op, int group_size) const override;
  double memory(const Tensor& t) const override;
  std::string memory_unit() const override { return "units"; }
  /// The puzzles' units of `t` (512·512 for a whole weight, 512·256 per batch of an activation, times the fraction
  /// held), an expert slice's tokens times `load`, the slice's expert_load_factor. The unit model's memory too.
  static double units(const Tensor& t, double load);
};

/// Unit costs for studying schedules (pipeline bubbles): compute is charged by the share of the model an op's
/// layer holds, the layers being equal shares. A forward or backward of one batch through a pipeline stage's
/// share of the model (1/stages of it) takes one second, so through one layer stages/layers seconds: 1 s for a
/// pipeline of one layer per stage (GPipe, 1F1B, ZB-H1) and for a schedule without a stage map (data parallel:
/// stages = layers), 1/v s for a chunk of an interleaved or V-shaped schedule with v layers per stage. Each
/// half of a split backward (input grad, weight grad) takes half of that; update, loss and all communication
/// take no time. Memory as the puzzle model. Durations are whole nanoseconds (a third of a second rounds).
class UnitCostModel final : public CostModel {
 public:
  /// `stages` pipeline stages over `layers` schedule layers (the default: one second per batch and layer).
  /// Throws std::invalid_argument unless 1 <= stages <= layers.
  explicit UnitCostModel(int stages = 1, int layers = 1);
  /// `stages` pipeline stages over layers holding `blocks_per_layer` transformer blocks (a stage layout,
  /// hardware/stage_layout.h): a layer's share of the model is its blocks over all of them, so it costs
  /// stages·blocks/B seconds per batch (0 for a layer of the embedding or the LM head alone). Throws
  /// std::invalid_argument unless 1 <= stages and the blocks are not negative and not all 0.
  UnitCostModel(int stages, const std::vector<int>& blocks_per_layer);
  std::string name() const override { return "unit"; }
  Time duration(const Op& op, int group_size) const override;
  double memory(const Tensor& t) const override {
    return PuzzleCostModel::units(t, t.expert() ? expert_load_factor(t.ep_index, t.ep_size) : 1.0);
  }
  std::string memory_unit() const override { return "units"; }
  /// Nanoseconds of a forward or backward of one batch through one layer: 1e9 * stages / layers, rounded.
  Time per_batch() const { return per_batch_; }
  /// The same for layer `layer` (per_batch() without a layout or for a layer outside it).
  Time per_batch(int layer) const;

 private:
  Time per_batch_ = kTicksPerSecond;  // forward or backward, one batch, one layer
  Time half_batch_ = kTicksPerSecond / 2;  // backward-input or backward-weight, one batch, one layer
  std::vector<Time> layer_per_batch_, layer_half_batch_;  // per layer, with a layout
};

/// The cost model called `name` ("puzzle", or "unit" at one second per batch and layer; a schedule's unit model,
/// scaled by its stage map, comes from make_schedule_cost_model). Throws std::invalid_argument for another name.
std::unique_ptr<CostModel> make_cost_model(const std::string& name);

}  // namespace trainsim
