#include "sim/ledger.h"

#include <fmt/format.h>

#include "sim/cost_model.h"

namespace trainsim {

void MemoryLedger::add(const Tensor& t) {
  ++counts_[t];
  total_ += cost_->memory(t, rank_);
}

bool MemoryLedger::remove(const Tensor& t) {
  auto it = counts_.find(t);
  if (it == counts_.end()) return false;
  if (--it->second == 0) counts_.erase(it);
  total_ -= cost_->memory(t, rank_);
  if (counts_.empty()) total_ = 0;  // no drift once empty
  return true;
}

int MemoryLedger::count(const Tensor& t) const {
  auto it = counts_.find(t);
  return it == counts_.end() ? 0 : it->second;
}

std::vector<Tensor> MemoryLedger::resident() const {
  std::vector<Tensor> out;
  for (const auto& [t, n] : counts_)
    for (int i = 0; i < n; ++i) out.push_back(t);
  return out;
}

std::string MemoryLedger::summary(std::size_t limit) const {
  auto all = resident();
  std::string s;
  for (std::size_t i = 0; i < all.size() && i < limit; ++i) s += (i ? ", " : "") + all[i].str();
  if (all.size() > limit) s += fmt::format(", ... and {} more", all.size() - limit);
  return s.empty() ? "nothing" : s;
}

}  // namespace trainsim
