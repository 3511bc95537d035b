// Which rank this process is, from the environment its launcher set (DESIGN §5):
//   torchrun / `trainsim launch`: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT;
//   Slurm (srun):                 SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID;
//   Open MPI (mpirun):            OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK.
// The first family with any variable set wins, in that order (torchrun started by srun sees both and its
// own RANK is the one that counts). Slurm and Open MPI do not say where rank 0 listens: MASTER_ADDR /
// MASTER_PORT, or the defaults passed in (the command line's --master-addr / --master-port), say it.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace trainsim::exec::dist {

/// Partial or inconsistent rank variables; the message names the variables and what is wrong.
struct RankEnvError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// Where this process sits in the job.
struct RankEnv {
  std::string source;  ///< "torchrun", "slurm" or "openmpi": the family of variables read
  int rank = 0;        ///< 0 .. world_size-1
  int world_size = 1;
  int local_rank = 0;  ///< index on this machine
  std::string master_addr;  ///< host name or address where rank 0 listens
  int master_port = 0;      ///< 1 .. 65535
};

/// Looks up one environment variable: its value, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
/// The process's real environment (getenv).
EnvLookup process_env();

/// Defaults for what Slurm and Open MPI leave out: empty / 0 = none.
struct RankEnvDefaults {
  std::string master_addr;
  int master_port = 0;
};

/// The rank settings in `env`; nullopt when no family's variables are set at all (the process runs every
/// rank itself). Throws RankEnvError when a family is set partially (RANK without WORLD_SIZE, no master
/// address), a value is not a number, or values contradict each other (RANK >= WORLD_SIZE, a port out of range).
std::optional<RankEnv> read_rank_env(const EnvLookup& env, const RankEnvDefaults& defaults = {});

}  // namespace trainsim::exec::dist
