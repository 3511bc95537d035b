// Output files get the format their name's extension says: a check that refuses a name whose extension says
// another format (`gen ... -o x.csv` wrote .sched text into a .csv file; `--svg t.png` would write SVG text
// into a .png file).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace trainsim::apps {

/// "" when `path` ends in one of `extensions` (lower case, with the dot: ".svg"; compared without case) or has no
/// extension (/dev/stdout, /dev/null, a pipe); else why not: "'t.png' ends in '.png', but this option writes
/// SVG: name it .svg". `what` says what the option writes ("SVG", "JSON").
std::string output_name_error(const std::string& path, const std::vector<std::string>& extensions,
                              const std::string& what);

/// A CLI11 check for an output option that refuses names as output_name_error does (CLI11 prefixes the option:
/// "--svg: 't.png' ends in ..."). Its name (in --help) is `name`.
CLI::Validator output_named(std::vector<std::string> extensions, std::string what, std::string name);

}  // namespace trainsim::apps
