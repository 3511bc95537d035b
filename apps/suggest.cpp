#include "apps/suggest.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace trainsim::apps {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_name(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& n : names) {
    std::size_t d = edit_distance(word, n);
    if (d < best_distance) {
      best = n;
      best_distance = d;
    }
  }
  return best;
}

std::vector<std::string> option_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options()) {
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
    for (const auto& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

namespace {
bool is_flag(const std::string& arg) {
  return arg.size() >= 2 && arg[0] == '-' && !(arg[1] >= '0' && arg[1] <= '9') && arg[1] != '.';
}

// The sub-command `word` names, if any.
const CLI::App* subcommand_named(const CLI::App& app, const std::string& word) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (sub->check_name(word)) return sub;
  return nullptr;
}
}  // namespace

std::string command_path(const CLI::App& app, const std::vector<std::string>& args) {
  for (const auto& arg : args) {
    if (arg == "--") break;
    if (is_flag(arg)) continue;
    if (const CLI::App* sub = subcommand_named(app, arg)) return "trainsim " + sub->get_name();
  }
  return "trainsim";
}

std::vector<std::string> unknown_option_hints(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> hints;
  const CLI::App* cmd = &app;
  std::string path = "trainsim";
  for (const auto& arg : args) {
    if (arg == "--") break;
    if (!is_flag(arg)) {
      // A word: the sub-command it names, if any, becomes the one whose options count.
      if (cmd == &app)
        if (const CLI::App* sub = subcommand_named(app, arg)) {
          cmd = sub;
          path += " " + sub->get_name();
        }
      continue;
    }
    std::string flag = arg.substr(0, arg.find('='));
    if (arg[1] != '-' && flag.size() > 2) flag = flag.substr(0, 2);  // "-ofile" is -o with a value
    std::vector<std::string> known = option_names(*cmd);
    if (cmd != &app)
      for (const auto& n : option_names(app)) known.push_back(n);  // --help, --version
    if (std::find(known.begin(), known.end(), flag) != known.end()) continue;
    std::string near = closest_name(flag, known);
    hints.push_back(near.empty() ? fmt::format("unknown option '{}' (`{} --help` lists the options)", flag, path)
                                 : fmt::format("unknown option '{}': did you mean {}?", flag, near));
  }
  return hints;
}

}  // namespace trainsim::apps
