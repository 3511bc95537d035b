// The generator registry: kind names and dispatch (schedules/generators.h).
#include <stdexcept>

#include "schedules/generators.h"
#include "schedules/generators/builder.h"

namespace trainsim {

const std::vector<std::string>& generator_kinds() {
  static const std::vector<std::string> kinds = {"gpipe", "1f1b",  "interleaved-1f1b", "looped-bfs", "zb-h1",
                                                 "ddp",   "zero1", "zero2",            "fsdp",       "pp-fsdp"};
  return kinds;
}

Schedule generate(const std::string& kind, const GenOptions& options) {
  if (kind == "gpipe") return gen::gen_gpipe(options);
  if (kind == "1f1b") return gen::gen_1f1b(options);
  if (kind == "interleaved-1f1b") return gen::gen_interleaved_1f1b(options);
  if (kind == "looped-bfs") return gen::gen_looped_bfs(options);
  if (kind == "zb-h1") return gen::gen_zb_h1(options);
  if (kind == "ddp" || kind == "zero1" || kind == "zero2" || kind == "fsdp") return gen::gen_data_parallel(kind, options);
  if (kind == "pp-fsdp") return gen::gen_pp_fsdp(options);
  std::string names;
  for (const auto& k : generator_kinds()) names += (names.empty() ? "" : ", ") + k;
  throw std::invalid_argument("unknown generator '" + kind + "' (the kinds are: " + names + ")");
}

}  // namespace trainsim
