#include "exec/dist/env.h"

#include <cstdlib>
#include <vector>

#include <fmt/format.h>

namespace trainsim::exec::dist {

namespace {

struct Family {
  const char* source;
  const char* rank;
  const char* size;
  const char* local;
  bool has_master;  ///< the family names rank 0's address itself (torchrun)
};

constexpr Family kFamilies[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", true},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", false},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", false},
};

// A whole decimal integer in [lo, hi], or RankEnvError naming the variable.
int parse_int(const std::string& name, const std::string& value, long lo, long hi) {
  std::size_t used = 0;
  long v = 0;
  try {
    v = std::stol(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (value.empty() || used != value.size())
    throw RankEnvError(fmt::format("{}='{}' is not a whole number", name, value));
  if (v < lo || v > hi) throw RankEnvError(fmt::format("{}={} is out of range ({} to {})", name, v, lo, hi));
  return static_cast<int>(v);
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

std::optional<RankEnv> read_rank_env(const EnvLookup& env, const RankEnvDefaults& defaults) {
  for (const Family& f : kFamilies) {
    auto rank = env(f.rank), size = env(f.size), local = env(f.local);
    if (!rank && !size && !local) continue;
    if (!rank || !size)
      throw RankEnvError(fmt::format("{} is set but {} is not: set both ({} variables)", rank ? f.rank : f.size,
                                     rank ? f.size : f.rank, f.source));
    RankEnv e;
    e.source = f.source;
    e.world_size = parse_int(f.size, *size, 1, 1 << 20);
    e.rank = parse_int(f.rank, *rank, 0, 1 << 20);
    if (e.rank >= e.world_size)
      throw RankEnvError(fmt::format("{}={} but {}={}: ranks run from 0 to {}", f.rank, e.rank, f.size, e.world_size,
                                     e.world_size - 1));
    e.local_rank = local ? parse_int(f.local, *local, 0, e.world_size - 1) : 0;
    if (e.local_rank > e.rank)
      throw RankEnvError(fmt::format("{}={} is above {}={}: a machine's local ranks are a subset of the ranks", f.local,
                                     e.local_rank, f.rank, e.rank));
    auto addr = env("MASTER_ADDR"), port = env("MASTER_PORT");
    e.master_addr = addr ? *addr : defaults.master_addr;
    if (port) e.master_port = parse_int("MASTER_PORT", *port, 1, 65535);
    else e.master_port = defaults.master_port;
    if (e.world_size > 1) {
      if (e.master_addr.empty())
        throw RankEnvError(fmt::format("{} and {} are set but not where rank 0 listens: set MASTER_ADDR{}", f.rank,
                                       f.size, f.has_master ? "" : " (or --master-addr)"));
      if (e.master_port == 0)
        throw RankEnvError(fmt::format("{} and {} are set but not rank 0's port: set MASTER_PORT{}", f.rank, f.size,
                                       f.has_master ? "" : " (or --master-port)"));
    }
    return e;
  }
  return std::nullopt;
}

}  // namespace trainsim::exec::dist
