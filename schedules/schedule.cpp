#include "schedules/schedule.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <fmt/format.h>

namespace trainsim {

bool is_tp_group_name(std::string_view name) {
  return name.substr(0, 2) == "tp" && (name.size() == 2 || !std::isalpha(static_cast<unsigned char>(name[2])));
}

std::vector<int> tp_groups_by_rank(const ScheduleHeader& h) {
  std::vector<int> group(static_cast<std::size_t>(std::max(h.world_size, 0)), 0);
  for (std::size_t g = 0; g < h.group_names.size() && g < h.groups.size(); ++g) {
    if (!is_tp_group_name(h.group_names[g])) continue;
    const int id = static_cast<int>(g) + 1;
    for (int r : h.groups[g]) {
      if (r < 0 || r >= h.world_size) continue;
      if (const int found = group[r]; found != 0)
        throw TpGroupConflict(fmt::format("rank {} is in two TP groups, {} ('{}') and {} ('{}')", r, found,
                                          h.group_names[found - 1], id, h.group_names[g]),
                              r, found, id);
      group[r] = id;
    }
  }
  return group;
}

}  // namespace trainsim
