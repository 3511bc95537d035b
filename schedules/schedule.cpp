#include "schedules/schedule.h"

#include <cctype>
#include <stdexcept>

#include <fmt/format.h>

namespace trainsim {

bool is_tp_group_name(std::string_view name) {
  return name.substr(0, 2) == "tp" && (name.size() == 2 || !std::isalpha(static_cast<unsigned char>(name[2])));
}

int tp_group_of(const ScheduleHeader& h, int rank) {
  int found = 0;
  for (std::size_t g = 0; g < h.group_names.size() && g < h.groups.size(); ++g) {
    if (!is_tp_group_name(h.group_names[g])) continue;
    for (int r : h.groups[g]) {
      if (r != rank) continue;
      if (found)
        throw std::invalid_argument(fmt::format("rank {} is in two TP groups, {} ('{}') and {} ('{}')", rank, found,
                                                h.group_names[found - 1], g + 1, h.group_names[g]));
      found = static_cast<int>(g) + 1;
    }
  }
  return found;
}

}  // namespace trainsim
