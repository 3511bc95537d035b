// A set of small non-negative integers (batch ids, shard ids), stored as sorted disjoint intervals.
//
// Batch and shard sets in schedules are almost always contiguous ("microbatches 0-255", "shards 0-1023"),
// so intervals keep a tensor identity small however many ranks or microbatches a schedule has. A set of one
// run (or none) is held inline, with no heap allocation: 12 bytes (4-byte aligned: the pointer to the runs
// of a larger set is kept as bytes), copied as two ints; only sets of two or more runs allocate. Copying
// tensors and ops is the simulator's most frequent operation, and a 16,384-rank schedule holds tens of
// millions of sets (bench/README.md).
#pragma once

#include <compare>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace trainsim {

/// Set of ids. Ordered, comparable, hashable by value; printed as "0-3,5".
class IdSet {
 public:
  /// A half-open run [first, second) of ids.
  using Run = std::pair<int, int>;

  IdSet() noexcept : n_(0) {}
  IdSet(const IdSet& other) : n_(other.n_) {
    if (n_ <= 1) new (&u_.one) Run(other.u_.one);  // the common case, inline: no call, no branch on the heap
    else copy_heap(other);
  }
  IdSet(IdSet&& other) noexcept : n_(other.n_) {
    if (n_ <= 1) new (&u_.one) Run(other.u_.one);
    else set_many(other.many());
    other.n_ = 0;
    new (&other.u_.one) Run(0, 0);
  }
  IdSet& operator=(const IdSet& other);
  IdSet& operator=(IdSet&& other) noexcept;
  ~IdSet() { release(); }
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
  /// Number of ids (one-run sets inline, without a call).
  int size() const { return n_ == 1 ? u_.one.second - u_.one.first : n_ == 0 ? 0 : size_heap(); }
  bool empty() const { return n_ == 0; }
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
  int first() const { return n_ == 0 ? -1 : data()->first; }
  /// Half-open runs [lo, hi) in increasing order.
  std::span<const Run> runs() const { return {data(), n_}; }
  /// "0-3,5" (inclusive ranges); "" when empty.
  std::string str() const;
  /// Space-separated ids, as the puzzles' timeline prints batches: "0 1 2 3".
  std::string spaced() const;

  /// Same ids (compared run by run; one-run sets without a call).
  friend bool operator==(const IdSet& a, const IdSet& b) noexcept {
    if (a.n_ != b.n_) return false;
    if (a.n_ == 0) return true;
    if (a.n_ == 1) return a.u_.one == b.u_.one;  // inline: the interning hash map compares sets this way
    return equal_heap(a, b);
  }
  friend std::strong_ordering operator<=>(const IdSet& a, const IdSet& b) noexcept;

 private:
  // Sets `runs` (sorted, disjoint, non-adjacent, each lo < hi) as this set's runs.
  void assign(const Run* runs, std::size_t n);
  void copy_heap(const IdSet& other);
  int size_heap() const;
  static bool equal_heap(const IdSet& a, const IdSet& b) noexcept;
  const Run* data() const { return n_ <= 1 ? &u_.one : many(); }
  // The heap runs of a set of two or more runs (the pointer is stored as bytes, so that the set needs only
  // 4-byte alignment and a tensor of two sets packs into 40 bytes).
  Run* many() const noexcept {
    Run* p;
    std::memcpy(&p, u_.bytes, sizeof p);
    return p;
  }
  void set_many(Run* p) noexcept { std::memcpy(u_.bytes, &p, sizeof p); }
  void release() noexcept {
    if (n_ > 1) delete[] many();
  }

  std::uint32_t n_;  // number of runs: 0 or 1 inline (u_.one), more on the heap (many(), exactly n_ runs)
  union Storage {
    Run one;
    unsigned char bytes[sizeof(Run*)];
    Storage() noexcept : one(0, 0) {}
  } u_;
};

static_assert(sizeof(IdSet) == 12 && alignof(IdSet) == 4, "an id set packs into 12 bytes (see above)");

}  // namespace trainsim
