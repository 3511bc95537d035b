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
  for (const auto& arg : args) {
    if (arg == "--") break;
    if (!is_flag(arg)) {
      // A word: the sub-command it names, if any, becomes the one whose options count.
      if (cmd == &app)
        if (const CLI::App* sub = subcommand_named(app, arg)) cmd = sub;
      continue;
    }
    std::string flag = arg.substr(0, arg.find('='));
    if (arg[1] != '-' && flag.size() > 2) flag = flag.substr(0, 2);  // "-ofile" is -o with a value
    std::vector<std::string> known = option_names(*cmd);
    if (cmd != &app)
      for (const auto& n : option_names(app)) known.push_back(n);  // --help, --version
    if (std::find(known.begin(), known.end(), flag) != known.end()) continue;
    std::string near = closest_name(flag, known);
    if (cmd->get_prefix_command()) {  // the command to run starts here; a near miss of an option is likely a typo
      if (!near.empty()) hints.push_back(fmt::format("unknown option '{}': did you mean {}?", flag, near));
      break;
    }
    hints.push_back(near.empty() ? fmt::format("unknown option '{}'", flag)
                                 : fmt::format("unknown option '{}': did you mean {}?", flag, near));
  }
  return hints;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  return names;
}

namespace {

// "Could not convert: --stages = x" (CLI11's ConversionError) as "--stages: expected an integer (INT), got 'x'";
// "" when the message has another form.
std::string conversion_line(const CLI::App& cmd, const std::string& message) {
  const std::string head = "Could not convert: ";
  const std::size_t eq = message.find(" = ");
  if (message.rfind(head, 0) != 0 || eq == std::string::npos) return {};
  const std::string name = message.substr(head.size(), eq - head.size()), value = message.substr(eq + 3);
  const CLI::Option* opt = cmd.get_option_no_throw(name);
  const std::string type = opt ? opt->get_type_name() : "";
  const std::string expected = type == "INT"    ? "an integer (INT)"
                               : type == "UINT"  ? "a non-negative integer (UINT)"
                               : type == "FLOAT" ? "a number (FLOAT)"
                               : type.empty()    ? "another value"
                                                 : type;
  return fmt::format("{}: expected {}, got '{}'", name, expected, value);
}

}  // namespace

std::vector<std::string> parse_error_lines(const CLI::App& app, const std::vector<std::string>& args,
                                           const CLI::Error& error) {
  std::vector<std::string> lines;
  const std::string path = command_path(app, args);
  if (path == "trainsim") {
    // No sub-command: the first word, if any, is a mistyped one.
    std::string word;
    for (const auto& arg : args) {
      if (arg == "--") break;
      if (!is_flag(arg)) {
        word = arg;
        break;
      }
    }
    const std::vector<std::string> names = subcommand_names(app);
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    if (!word.empty()) {
      const std::string near = closest_name(word, names);
      lines.push_back(near.empty() ? fmt::format("trainsim: unknown command '{}'", word)
                                   : fmt::format("trainsim: unknown command '{}': did you mean {}?", word, near));
    } else {
      for (const auto& hint : unknown_option_hints(app, args)) lines.push_back("trainsim: " + hint);
      if (lines.empty()) lines.push_back("trainsim: no command given");
    }
    lines.push_back("trainsim: the commands are " + list);
    lines.push_back("Run `trainsim --help` for what each does, `trainsim COMMAND --help` for its options.");
    return lines;
  }
  for (const auto& hint : unknown_option_hints(app, args)) lines.push_back(path + ": " + hint);
  if (lines.empty()) {
    const CLI::App* cmd = &app;
    if (const CLI::App* sub = subcommand_named(app, path.substr(path.find(' ') + 1))) cmd = sub;
    std::string line = conversion_line(*cmd, error.what());
    lines.push_back(path + ": " + (line.empty() ? std::string(error.what()) : line));
  }
  lines.push_back("Run `" + path + " --help` for the options.");
  return lines;
}

}  // namespace trainsim::apps
