// Memory ledger: the tensors resident on one rank, as a multiset (the same tensor held twice counts twice,
// as two store entries do in the puzzles).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sim/tensor.h"

namespace trainsim {

class CostModel;

/// Resident tensors of one rank and their total memory.
class MemoryLedger {
 public:
  /// `rank`: the rank whose memory this is (passed to CostModel::memory; -1 when not known).
  explicit MemoryLedger(const CostModel& cost, int rank = -1) : cost_(&cost), rank_(rank) {}
  /// Adds one instance of t.
  void add(const Tensor& t);
  /// Removes one instance of t. Returns false (and changes nothing) when t is not resident.
  bool remove(const Tensor& t);
  /// Number of resident instances of t.
  int count(const Tensor& t) const;
  /// Total memory of the resident tensors, in the cost model's unit.
  double total() const { return total_; }
  /// Resident tensors in canonical order, one entry per instance.
  std::vector<Tensor> resident() const;
  /// "W0, W1, A0{0-3}" (at most `limit` names, then "... and N more").
  std::string summary(std::size_t limit = 12) const;

 private:
  const CostModel* cost_;
  int rank_ = -1;
  std::map<Tensor, int> counts_;
  double total_ = 0;
};

}  // namespace trainsim
