#include "apps/commands.h"

namespace trainsim::apps {

void add_gen_command(CLI::App&, int*) {}

}  // namespace trainsim::apps
