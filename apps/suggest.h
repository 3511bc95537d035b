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
/// you mean --stages?" ("unknown option '--zz'" with no close name). Arguments after "--" are left alone, and so
/// is everything from the first unknown flag of a sub-command that runs a command (`launch`: the command starts
/// there; that flag gets a line only when it is close to an option). Empty when every flag is known.
std::vector<std::string> unknown_option_hints(const CLI::App& app, const std::vector<std::string>& args);

/// The sub-command names of `app`, in the order they were added: "puzzles", "validate", ...
std::vector<std::string> subcommand_names(const CLI::App& app);

/// What to print, line by line, for a command line that CLI11 refused with `error` (`args`: argv without the
/// program name). Every line but the last starts with the sub-command ("trainsim gen: "):
/// - a word that is no sub-command: "trainsim: unknown command 'simm': did you mean sim?" and the list;
/// - no sub-command: "trainsim: no command given" and the list;
/// - unknown options: one unknown_option_hints line each, instead of CLI11's "The following arguments were not
///   expected";
/// - a value of the wrong type: "--stages: expected an integer (INT), got 'x'";
/// - anything else: CLI11's message.
/// The last line says where the options are: "Run `trainsim gen --help` for the options."
std::vector<std::string> parse_error_lines(const CLI::App& app, const std::vector<std::string>& args,
                                           const CLI::Error& error);

}  // namespace trainsim::apps
