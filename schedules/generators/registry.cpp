// The generator registry: kind names and dispatch (schedules/generators.h).
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "schedules/generators.h"
#include "schedules/generators/builder.h"
#include "schedules/limits.h"

namespace trainsim {

const std::vector<std::string>& generator_kinds() {
  static const std::vector<std::string> kinds = {"gpipe", "1f1b",  "interleaved-1f1b", "looped-bfs", "zb-h1", "zbv", "dualpipev", "interleaved-zb",
                                                 "ddp",   "zero1", "zero2",            "fsdp",       "zero3-owner", "pp-fsdp"};
  return kinds;
}

namespace {

// The limits of schedules/limits.h on what the options ask for, and a bound on the work (layers x microbatches,
// each one or more ops), so that a mistyped option is refused at once rather than running out of memory.
void check_size(const std::string& kind, const GenOptions& o) {
  const bool data_parallel = kind == "ddp" || kind == "zero1" || kind == "zero2" || kind == "fsdp" || kind == "zero3-owner";
  const bool pp_fsdp = kind == "pp-fsdp";
  const bool chunked = kind == "interleaved-1f1b" || kind == "looped-bfs" || kind == "interleaved-zb";
  auto pos = [](int v) { return static_cast<long long>(std::max(v, 1)); };
  const long long world = data_parallel ? pos(o.dp) : pp_fsdp ? pos(o.stages) * pos(o.dp) : pos(o.stages);
  const long long layers = data_parallel ? (o.layers == 0 ? 4 : pos(o.layers))
                                         : pos(o.stages) * (chunked ? pos(o.chunks) : kind == "zbv" || kind == "dualpipev" ? 2 : 1);
  const long long microbatches = pos(o.microbatches) * (data_parallel || pp_fsdp ? pos(o.dp) : 1);
  auto over = [&](const char* what, long long v, long long limit) {
    if (v > limit)
      throw std::invalid_argument(fmt::format("{}: the options ask for {} {}, above the limit of {} "
                                              "(docs/schedule-format.md, Limits)",
                                              kind, v, what, limit));
  };
  over("ranks", world, kMaxWorldSize);
  over("layers", layers, kMaxCount);
  over("microbatches", microbatches, kMaxCount);
  over("layer-microbatch pairs (the work of one step)", layers * microbatches, kMaxGeneratedWork);
}

}  // namespace

Schedule generate(const std::string& kind, const GenOptions& options) {
  check_size(kind, options);
  if (kind == "gpipe") return gen::gen_gpipe(options);
  if (kind == "1f1b") return gen::gen_1f1b(options);
  if (kind == "interleaved-1f1b") return gen::gen_interleaved_1f1b(options);
  if (kind == "looped-bfs") return gen::gen_looped_bfs(options);
  if (kind == "zb-h1") return gen::gen_zb_h1(options);
  if (kind == "zbv") return gen::gen_zbv(options);
  if (kind == "dualpipev") return gen::gen_dualpipev(options);
  if (kind == "interleaved-zb") return gen::gen_interleaved_zb(options);
  if (kind == "ddp" || kind == "zero1" || kind == "zero2" || kind == "fsdp") return gen::gen_data_parallel(kind, options);
  if (kind == "pp-fsdp") return gen::gen_pp_fsdp(options);
  if (kind == "zero3-owner") return gen::gen_zero3_owner(options);
  std::string names;
  for (const auto& k : generator_kinds()) names += (names.empty() ? "" : ", ") + k;
  throw std::invalid_argument("unknown generator '" + kind + "' (the kinds are: " + names + ")");
}

}  // namespace trainsim
