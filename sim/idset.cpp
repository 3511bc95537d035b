#include "sim/idset.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace trainsim {

IdSet::IdSet(std::initializer_list<int> ids) {
  for (int id : ids) insert(id);
}

IdSet IdSet::range(int lo, int hi) {
  IdSet s;
  if (lo < 0) throw std::invalid_argument(fmt::format("id range starts below zero: {}", lo));
  if (hi > lo) s.runs_.emplace_back(lo, hi);
  return s;
}

IdSet IdSet::from_runs(std::vector<std::pair<int, int>> runs) {
  std::sort(runs.begin(), runs.end());
  IdSet out;
  for (auto r : runs) {
    if (r.first < 0) throw std::invalid_argument(fmt::format("ids are non-negative, got {}", r.first));
    if (r.second <= r.first) continue;
    if (!out.runs_.empty() && r.first <= out.runs_.back().second)
      out.runs_.back().second = std::max(out.runs_.back().second, r.second);
    else
      out.runs_.push_back(r);
  }
  return out;
}

void IdSet::insert(int id) {
  if (id < 0) throw std::invalid_argument(fmt::format("ids are non-negative, got {}", id));
  *this = *this | IdSet::range(id, id + 1);
}

int IdSet::size() const {
  int n = 0;
  for (auto [lo, hi] : runs_) n += hi - lo;
  return n;
}

bool IdSet::contains(int id) const {
  auto it = std::upper_bound(runs_.begin(), runs_.end(), id, [](int v, const auto& r) { return v < r.first; });
  if (it == runs_.begin()) return false;
  --it;
  return id < it->second;
}

bool IdSet::contains(const IdSet& other) const { return (*this & other) == other; }

bool IdSet::intersects(const IdSet& other) const { return !(*this & other).empty(); }

IdSet IdSet::operator|(const IdSet& other) const {
  std::vector<std::pair<int, int>> all;
  all.reserve(runs_.size() + other.runs_.size());
  std::merge(runs_.begin(), runs_.end(), other.runs_.begin(), other.runs_.end(), std::back_inserter(all));
  IdSet out;
  for (auto r : all) {
    if (!out.runs_.empty() && r.first <= out.runs_.back().second)
      out.runs_.back().second = std::max(out.runs_.back().second, r.second);
    else
      out.runs_.push_back(r);
  }
  return out;
}

IdSet IdSet::operator&(const IdSet& other) const {
  IdSet out;
  std::size_t i = 0, j = 0;
  while (i < runs_.size() && j < other.runs_.size()) {
    int lo = std::max(runs_[i].first, other.runs_[j].first);
    int hi = std::min(runs_[i].second, other.runs_[j].second);
    if (lo < hi) out.runs_.emplace_back(lo, hi);
    if (runs_[i].second < other.runs_[j].second) ++i; else ++j;
  }
  return out;
}

IdSet IdSet::operator-(const IdSet& other) const {
  IdSet out;
  std::size_t j = 0;
  for (auto [lo, hi] : runs_) {
    while (j < other.runs_.size() && other.runs_[j].second <= lo) ++j;
    std::size_t k = j;
    int from = lo;
    for (; k < other.runs_.size() && other.runs_[k].first < hi; ++k) {
      if (other.runs_[k].first > from) out.runs_.emplace_back(from, other.runs_[k].first);
      from = std::max(from, other.runs_[k].second);
    }
    if (from < hi) out.runs_.emplace_back(from, hi);
  }
  return out;
}

std::vector<int> IdSet::ids() const {
  std::vector<int> v;
  for (auto [lo, hi] : runs_)
    for (int i = lo; i < hi; ++i) v.push_back(i);
  return v;
}

std::string IdSet::str() const {
  std::string s;
  for (auto [lo, hi] : runs_) {
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
