#include "schedules/rank_source.h"

namespace trainsim {

Schedule RankSource::collect(const RankSource& source) {
  Schedule s;
  s.header = source.header();
  s.ranks.reserve(source.world_size());
  for (int r = 0; r < source.world_size(); ++r) s.ranks.push_back(source.ops(r));
  return s;
}

std::size_t HeldSchedule::op_estimate() const {
  std::size_t n = 0;
  for (const auto& ops : ranks_) n += ops.size();
  return n;
}

Schedule HeldSchedule::take() {
  Schedule s;
  s.header = header_;
  s.ranks = std::move(ranks_);
  ranks_.clear();
  return s;
}

}  // namespace trainsim
