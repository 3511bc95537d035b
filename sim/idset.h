// A set of small non-negative integers (batch ids, shard ids), stored as sorted disjoint intervals.
//
// Batch and shard sets in schedules are almost always contiguous ("microbatches 0-255", "shards 0-1023"),
// so intervals keep a tensor identity small however many ranks or microbatches a schedule has.
#pragma once

#include <compare>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace trainsim {

/// Set of ids. Ordered, comparable, hashable by value; printed as "0-3,5".
class IdSet {
 public:
  IdSet() = default;
  /// The set of the listed ids (any order, duplicates allowed).
  IdSet(std::initializer_list<int> ids);
  /// The ids in [lo, hi). Empty when hi <= lo.
  static IdSet range(int lo, int hi);
  /// A set from any sequence of ids (sorted once: O(n log n)). Throws std::invalid_argument for a negative id.
  template <typename Range>
  static IdSet of(const Range& ids) {
    std::vector<std::pair<int, int>> runs;
    for (int id : ids) runs.emplace_back(id, id + 1);
    return from_runs(std::move(runs));
  }
  /// The union of half-open runs [lo, hi) given in any order, overlapping or not (empty runs are skipped):
  /// O(n log n) for n runs. Throws std::invalid_argument for a negative lo.
  static IdSet from_runs(std::vector<std::pair<int, int>> runs);

  /// Adds one id. Throws std::invalid_argument for a negative id.
  void insert(int id);
  /// Number of ids.
  int size() const;
  bool empty() const { return runs_.empty(); }
  bool contains(int id) const;
  /// True when every id of `other` is in this set.
  bool contains(const IdSet& other) const;
  bool intersects(const IdSet& other) const;
  /// Union.
  IdSet operator|(const IdSet& other) const;
  /// Intersection.
  IdSet operator&(const IdSet& other) const;
  /// Difference: the ids of this set that are not in `other` (linear in the number of runs).
  IdSet operator-(const IdSet& other) const;
  /// The ids in increasing order.
  std::vector<int> ids() const;
  /// Smallest id; -1 when empty.
  int first() const { return runs_.empty() ? -1 : runs_.front().first; }
  /// Half-open runs [lo, hi) in increasing order.
  const std::vector<std::pair<int, int>>& runs() const { return runs_; }
  /// "0-3,5" (inclusive ranges); "" when empty.
  std::string str() const;
  /// Space-separated ids, as the puzzles' timeline prints batches: "0 1 2 3".
  std::string spaced() const;

  friend bool operator==(const IdSet&, const IdSet&) = default;
  friend auto operator<=>(const IdSet& a, const IdSet& b) { return a.runs_ <=> b.runs_; }

 private:
  std::vector<std::pair<int, int>> runs_;  // sorted, disjoint, non-adjacent, each lo < hi
};

}  // namespace trainsim
