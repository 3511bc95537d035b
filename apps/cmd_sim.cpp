#include "apps/commands.h"

namespace trainsim::apps {

void add_sim_commands(CLI::App&, int*) {}

}  // namespace trainsim::apps
