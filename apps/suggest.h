// "Did you mean --stages?": the closest option name for a flag a sub-command does not know.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace trainsim::apps {

/// Levenshtein distance between `a` and `b` (insertions, deletions and substitutions cost 1).
std::size_t edit_distance(const std::string& a, const std::string& b);

/// The name in `names` closest to `word` by edit distance, when it is close enough to be what was meant
/// (at most 2 edits, or a third of the word's length for long words; ties go to the first name). "" when none is.
std::string closest_name(const std::string& word, const std::vector<std::string>& names);

/// Every option name of `cmd` as typed: "--stages", "-o", "--help".
std::vector<std::string> option_names(const CLI::App& cmd);

/// The sub-command `args` (argv without the program name) runs, as typed by a user: "trainsim gen"; "trainsim"
/// when they name none.
std::string command_path(const CLI::App& app, const std::vector<std::string>& args);

/// For each argument of `args` (argv without the program name) that looks like a flag ("-x", "--name",
/// "--name=value") and that the sub-command it follows does not know, a line "unknown option '--stage': did
/// you mean --stages?" (or, with no close name, where to see the options). Arguments after
/// "--" are left alone. Empty when every flag is known.
std::vector<std::string> unknown_option_hints(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace trainsim::apps
