#include "plan/planner.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <limits>
#include <thread>

namespace trainsim::plan {

namespace {

// Runs f(i) for i in [0, n) on `threads` threads; results go to index i, so the order does not depend on them.
template <typename F>
void parallel_for(std::size_t n, unsigned threads, F&& f) {
  if (threads <= 1 || n <= 1) {
    for (std::size_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::min<std::size_t>(threads, n); ++t)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < n;) f(i);
    });
  for (auto& th : pool) th.join();
}

bool better(const PlanRow& a, std::size_t ia, const PlanRow& b, std::size_t ib) {
  if (a.fits() != b.fits()) return a.fits();
  if (a.fits()) {
    if (a.eval.tokens_per_s_per_gpu != b.eval.tokens_per_s_per_gpu)
      return a.eval.tokens_per_s_per_gpu > b.eval.tokens_per_s_per_gpu;
  }
  if (a.eval.peak_memory_bytes != b.eval.peak_memory_bytes) return a.eval.peak_memory_bytes < b.eval.peak_memory_bytes;
  return ia < ib;
}

}  // namespace

PlanResult run_plan(const PlanRequest& r, unsigned threads, const std::function<void(std::size_t, std::size_t)>& progress) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  Enumeration en = enumerate(r);
  PlanResult out;
  out.rejected = en.removed;
  for (const auto& [why, n] : en.removed) out.combinations += n;
  out.combinations += static_cast<long long>(en.candidates.size());
  const double usable = r.device.usable_memory_bytes();
  // The memory bound, then the time bound, for every candidate (cheap: closed forms).
  struct Pending {
    std::size_t index;
    double memory_bound, time_bound;
  };
  std::vector<Pending> pending;
  {
    std::vector<Pending> all(en.candidates.size());
    parallel_for(all.size(), threads, [&](std::size_t i) {
      all[i] = {i, memory_lower_bound(en.candidates[i], r), time_lower_bound(en.candidates[i], r)};
    });
    for (const Pending& p : all) {
      if (p.memory_bound > usable) ++out.rejected["memory_bound"];
      else pending.push_back(p);
    }
  }
  // Lowest time bound first (ties: enumeration order), so that the threshold tightens early.
  std::stable_sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) { return a.time_bound < b.time_bound; });
  const std::size_t keep = static_cast<std::size_t>(std::max(1, r.top));
  std::vector<double> best_times;  // simulated step times of fitting candidates, the lowest `keep` of them
  std::vector<std::pair<std::size_t, PlanRow>> rows;  // (enumeration index, row)
  for (std::size_t start = 0; start < pending.size(); start += kPlanBatch) {
    const std::size_t end = std::min(pending.size(), start + kPlanBatch);
    const double threshold = best_times.size() >= keep ? best_times[keep - 1] : std::numeric_limits<double>::infinity();
    std::vector<Pending> batch;
    for (std::size_t i = start; i < end; ++i) {
      if (pending[i].time_bound > threshold) ++out.rejected["dominated"];
      else batch.push_back(pending[i]);
    }
    std::vector<Evaluation> evals(batch.size());
    parallel_for(batch.size(), threads, [&](std::size_t i) { evals[i] = evaluate(en.candidates[batch[i].index], r); });
    for (std::size_t i = 0; i < batch.size(); ++i) {
      ++out.simulated;
      if (!evals[i].simulated()) {
        ++out.rejected["invalid"];
        if (out.first_invalid.empty()) out.first_invalid = evals[i].error;
        continue;
      }
      if (!evals[i].outcome.empty()) ++out.rejected["out_of_memory"];
      else best_times.push_back(evals[i].step_time_s);
      rows.push_back({batch[i].index, PlanRow{en.candidates[batch[i].index], std::move(evals[i]), batch[i].memory_bound,
                                              batch[i].time_bound}});
    }
    std::sort(best_times.begin(), best_times.end());
    if (best_times.size() > keep) best_times.resize(keep);
    if (progress) progress(end, pending.size());
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return better(a.second, a.first, b.second, b.first); });
  for (auto& [index, row] : rows) out.rows.push_back(std::move(row));
  if (progress && pending.empty()) progress(0, 0);
  return out;
}

}  // namespace trainsim::plan
