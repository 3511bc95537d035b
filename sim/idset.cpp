#include "sim/idset.h"

#include <algorithm>
#include <new>
#include <stdexcept>

// Boost.Container's small_vector: the runs a set operation produces, on the stack while there are few.
#include <boost/container/small_vector.hpp>
#include <fmt/format.h>

namespace trainsim {

namespace {

using Runs = boost::container::small_vector<IdSet::Run, 8>;

// Appends [lo, hi) to runs sorted by lo, merging it with the last run when they overlap or touch.
void append(Runs& out, int lo, int hi) {
  if (!out.empty() && lo <= out.back().second)
    out.back().second = std::max(out.back().second, hi);
  else
    out.emplace_back(lo, hi);
}

}  // namespace

void IdSet::copy_heap(const IdSet& other) {
  Run* runs = new Run[other.n_];
  std::copy(other.many(), other.many() + other.n_, runs);
  set_many(runs);
}

IdSet& IdSet::operator=(const IdSet& other) {
  if (this != &other) assign(other.data(), other.n_);
  return *this;
}

IdSet& IdSet::operator=(IdSet&& other) noexcept {
  if (this != &other) {
    release();
    n_ = other.n_;
    if (n_ <= 1) new (&u_.one) Run(other.u_.one);
    else set_many(other.many());
    other.n_ = 0;
    new (&other.u_.one) Run(0, 0);
  }
  return *this;
}

void IdSet::assign(const Run* runs, std::size_t n) {
  if (n <= 1) {
    Run one = n == 1 ? runs[0] : Run{};
    release();
    new (&u_.one) Run(one);
  } else {
    Run* heap = new Run[n];
    std::copy(runs, runs + n, heap);
    release();
    set_many(heap);
  }
  n_ = static_cast<std::uint32_t>(n);
}

bool IdSet::equal_heap(const IdSet& a, const IdSet& b) noexcept {
  return std::equal(a.many(), a.many() + a.n_, b.many());
}

std::strong_ordering operator<=>(const IdSet& a, const IdSet& b) noexcept {
  return std::lexicographical_compare_three_way(a.data(), a.data() + a.n_, b.data(), b.data() + b.n_);
}

IdSet::IdSet(std::initializer_list<int> ids) : IdSet() {
  if (ids.size() == 1) {
    if (*ids.begin() < 0) throw std::invalid_argument(fmt::format("ids are non-negative, got {}", *ids.begin()));
    Run one{*ids.begin(), *ids.begin() + 1};
    assign(&one, 1);
    return;
  }
  for (int id : ids) insert(id);
}

IdSet IdSet::range(int lo, int hi) {
  IdSet s;
  if (lo < 0) throw std::invalid_argument(fmt::format("id range starts below zero: {}", lo));
  if (hi > lo) {
    Run one{lo, hi};
    s.assign(&one, 1);
  }
  return s;
}

IdSet IdSet::from_runs(std::vector<std::pair<int, int>> runs) {
  std::sort(runs.begin(), runs.end());
  Runs out;
  for (auto r : runs) {
    if (r.first < 0) throw std::invalid_argument(fmt::format("ids are non-negative, got {}", r.first));
    if (r.second <= r.first) continue;
    append(out, r.first, r.second);
  }
  IdSet s;
  s.assign(out.data(), out.size());
  return s;
}

void IdSet::insert(int id) {
  if (id < 0) throw std::invalid_argument(fmt::format("ids are non-negative, got {}", id));
  *this = *this | IdSet::range(id, id + 1);
}

int IdSet::size_heap() const {
  int n = 0;
  for (auto [lo, hi] : runs()) n += hi - lo;
  return n;
}

bool IdSet::contains(int id) const {
  auto rs = runs();
  auto it = std::upper_bound(rs.begin(), rs.end(), id, [](int v, const Run& r) { return v < r.first; });
  if (it == rs.begin()) return false;
  --it;
  return id < it->second;
}

bool IdSet::contains(const IdSet& other) const {
  // Every run of `other` lies inside one run of this set (runs are disjoint and non-adjacent): one merge pass,
  // nothing built.
  auto a = runs();
  std::size_t i = 0;
  for (const Run& r : other.runs()) {
    while (i < a.size() && a[i].second < r.second) ++i;
    if (i == a.size() || a[i].first > r.first) return false;
  }
  return true;
}

bool IdSet::intersects(const IdSet& other) const {
  auto a = runs(), b = other.runs();
  for (std::size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    if (std::max(a[i].first, b[j].first) < std::min(a[i].second, b[j].second)) return true;
    if (a[i].second < b[j].second) ++i; else ++j;
  }
  return false;
}

IdSet IdSet::operator|(const IdSet& other) const {
  auto a = runs(), b = other.runs();
  // Two runs that touch or overlap (a weight grad summed over consecutive microbatches): one run, no merge.
  if (a.size() == 1 && b.size() == 1 && a[0].first <= b[0].second && b[0].first <= a[0].second)
    return range(std::min(a[0].first, b[0].first), std::max(a[0].second, b[0].second));
  Runs out;
  std::size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    const Run r = j == b.size() || (i < a.size() && a[i] < b[j]) ? a[i++] : b[j++];
    append(out, r.first, r.second);
  }
  IdSet s;
  s.assign(out.data(), out.size());
  return s;
}

IdSet IdSet::operator&(const IdSet& other) const {
  auto a = runs(), b = other.runs();
  Runs out;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    int lo = std::max(a[i].first, b[j].first);
    int hi = std::min(a[i].second, b[j].second);
    if (lo < hi) out.emplace_back(lo, hi);
    if (a[i].second < b[j].second) ++i; else ++j;
  }
  IdSet s;
  s.assign(out.data(), out.size());
  return s;
}

IdSet IdSet::operator-(const IdSet& other) const {
  auto b = other.runs();
  Runs out;
  std::size_t j = 0;
  for (auto [lo, hi] : runs()) {
    while (j < b.size() && b[j].second <= lo) ++j;
    std::size_t k = j;
    int from = lo;
    for (; k < b.size() && b[k].first < hi; ++k) {
      if (b[k].first > from) out.emplace_back(from, b[k].first);
      from = std::max(from, b[k].second);
    }
    if (from < hi) out.emplace_back(from, hi);
  }
  IdSet s;
  s.assign(out.data(), out.size());
  return s;
}

std::vector<int> IdSet::ids() const {
  std::vector<int> v;
  for (auto [lo, hi] : runs())
    for (int i = lo; i < hi; ++i) v.push_back(i);
  return v;
}

std::string IdSet::str() const {
  std::string s;
  for (auto [lo, hi] : runs()) {
    if (!s.empty()) s += ',';
    s += hi - lo == 1 ? fmt::format("{}", lo) : fmt::format("{}-{}", lo, hi - 1);
  }
  return s;
}

std::string IdSet::spaced() const {
  std::string s;
  for (int id : ids()) {
    if (!s.empty()) s += ' ';
    s += fmt::format("{}", id);
  }
  return s;
}

}  // namespace trainsim
