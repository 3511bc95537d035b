#include "apps/commands.h"

namespace trainsim::apps {

void add_convert_command(CLI::App&, int*) {}

}  // namespace trainsim::apps
