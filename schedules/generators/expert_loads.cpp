// How the tokens of a Mixture-of-Experts layer spread over its expert slices (docs/design.md, "Mixture of
// Experts"; the header's expert_load): given per slice (--expert-load), per expert (--expert-load-file, e.g. a
// router's measured tokens per expert, summed into the slices that hold them), or as the busiest slice's max/mean
// (--moe-imbalance).
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <system_error>
#include <stdexcept>

#include "schedules/generators/builder.h"
#include "schedules/input.h"

namespace trainsim {

std::vector<double> parse_expert_loads(std::string_view text, const std::string& name) {
  constexpr std::size_t kMaxExperts = 65536;
  std::vector<double> out;
  int line = 1;
  std::size_t i = 0;
  auto fail = [&](const std::string& why) {
    return std::invalid_argument(fmt::format("{}:{}: {}", name, line, why));
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\n') {
      ++line, ++i;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == ',') {
      ++i;
    } else if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else {
      std::size_t end = i;
      while (end < text.size() && text[end] != '\n' && text[end] != ' ' && text[end] != '\t' && text[end] != '\r' &&
             text[end] != ',' && text[end] != '#')
        ++end;
      const std::string_view word = text.substr(i, end - i);
      double v = 0;  // (from_chars: the C locale's digits whatever the user's, as the .sched reader reads numbers)
      const auto [stop, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
      const bool whole = stop == word.data() + word.size();
      if (whole && ec == std::errc::result_out_of_range)
        throw fail(fmt::format("an expert's load is 0 to 1e15, got {}", shown(word)));
      if (word.size() > 64 || ec != std::errc() || !whole)
        throw fail(fmt::format("'{}' is not a number (an expert's load: tokens, or any relative measure)", shown(word)));
      if (!std::isfinite(v) || v < 0 || v > 1e15)
        throw fail(fmt::format("an expert's load is 0 to 1e15, got {}", shown(word)));
      if (out.size() == kMaxExperts) throw fail(fmt::format("more than {} experts' loads", kMaxExperts));
      out.push_back(v);
      i = end;
    }
  }
  if (out.empty()) throw std::invalid_argument(fmt::format("{}: no expert's load in it", name));
  double total = 0;
  for (double v : out) total += v;
  if (!(total > 0)) throw std::invalid_argument(fmt::format("{}: every expert's load is 0", name));
  return out;
}

std::vector<double> read_expert_loads(const std::string& path) { return parse_expert_loads(read_input_file(path), path); }

std::vector<double> slice_loads(const std::vector<double>& per_expert, int ep) {
  const std::size_t E = per_expert.size();
  if (ep < 1 || E % static_cast<std::size_t>(ep) != 0)
    throw std::invalid_argument(fmt::format("{} experts' loads do not split into {} expert slices of equal size", E, ep));
  const std::size_t per = E / static_cast<std::size_t>(ep);
  std::vector<double> out(static_cast<std::size_t>(ep), 0.0);
  double total = 0;
  for (std::size_t x = 0; x < E; ++x) out[x / per] += per_expert[x], total += per_expert[x];
  for (std::size_t j = 0; j < out.size(); ++j) {
    if (!(out[j] > 0))
      throw std::invalid_argument(fmt::format("expert slice {} of {} (experts {} to {}) gets no token: its load is 0",
                                              j, ep, j * per, (j + 1) * per - 1));
    out[j] = out[j] / (total / ep);
  }
  return out;
}

void check_expert_load_count(const std::vector<double>& per_expert, int experts, const std::string& model,
                             const std::string& what) {
  if (!per_expert.empty() && per_expert.size() != static_cast<std::size_t>(experts))
    throw std::invalid_argument(fmt::format("{} gives {} experts' loads, but the model '{}' has {} experts", what,
                                            per_expert.size(), model, experts));
}

namespace gen {

std::vector<double> expert_loads(const std::string& kind, const GenOptions& o, int e) {
  if ((!o.expert_load.empty()) + (o.moe_imbalance != 0) + (!o.per_expert_load.empty()) > 1)
    throw std::invalid_argument(
        fmt::format("{}: give one of --expert-load, --expert-load-file and --moe-imbalance", kind));
  std::vector<double> load = o.expert_load;
  if (!o.per_expert_load.empty()) {
    try {
      load = slice_loads(o.per_expert_load, e);
    } catch (const std::invalid_argument& x) {
      throw std::invalid_argument(fmt::format("{}: --expert-load-file: {}", kind, x.what()));
    }
  }
  if (!load.empty() && load.size() != static_cast<std::size_t>(e))
    throw std::invalid_argument(fmt::format("{}: --expert-load gives {} loads but --ep {} has {} expert slices", kind,
                                            load.size(), e, e));
  for (double v : load)
    if (!std::isfinite(v) || v <= 0 || v > 1e6)
      throw std::invalid_argument(fmt::format("{}: --expert-load: a load is above 0 and at most 1e6 (got {})", kind, v));
  if (o.moe_imbalance != 0) {
    // Dropless routing with the busiest slice at max/mean = R (Megatron-Core's warning of the first steps, before
    // the router balances): slice 0 gets R, the others (e - R) / (e - 1) each, so the mean stays 1.
    const double r = o.moe_imbalance;
    // (r = e would leave the other slices no token: a load of 0, which is no expert parallelism at all.)
    if (!std::isfinite(r) || r < 1 || (e > 1 ? r >= e : r != 1))
      throw std::invalid_argument(fmt::format("{}: --moe-imbalance is the busiest slice's load over the mean, at least 1 "
                                              "and below --ep ({}), got {}",
                                              kind, e, r));
    load.assign(static_cast<std::size_t>(e), e > 1 ? (e - r) / (e - 1) : 1.0);
    load[0] = r;
  }
  return load;
}

}  // namespace gen

}  // namespace trainsim
