// The worked examples in docs/schedule-format.md parse, print back identically and validate.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "schedules/replay.h"
#include "schedules/text_format.h"

using namespace trainsim;

TEST_CASE("the schedule-format document's examples are canonical and valid") {
  std::ifstream f(std::string(TRAINSIM_SOURCE_DIR) + "/docs/schedule-format.md");
  REQUIRE(f);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string doc = ss.str();
  int examples = 0;
  for (std::size_t at = doc.find("```sched\n"); at != std::string::npos; at = doc.find("```sched\n", at)) {
    at += 9;
    std::size_t end = doc.find("```", at);
    REQUIRE(end != std::string::npos);
    std::string text = doc.substr(at, end - at);
    ++examples;
    CAPTURE(examples);
    Schedule s = parse_schedule(text, "example.sched");
    CHECK(print_schedule(s) == text);
    SimResult r = simulate(s);
    CHECK(r.error == "");
    CHECK(r.ok);
  }
  CHECK(examples == 4);
}

// ---- The docs against the command (issue 18): what can be checked mechanically is.

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "cli_helpers.h"
#include "schedules/generators.h"

namespace {

std::string read_doc(const std::string& relative) {
  std::ifstream f(std::string(TRAINSIM_SOURCE_DIR) + "/" + relative, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The docs whose commands a user runs as written.
std::vector<std::string> doc_files() {
  std::vector<std::string> files = {"README.md", "examples/README.md", "bench/README.md"};
  for (const auto& e : std::filesystem::directory_iterator(std::string(TRAINSIM_SOURCE_DIR) + "/docs"))
    if (e.path().extension() == ".md") files.push_back("docs/" + e.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
}

// The code of a Markdown text: every line of its fenced blocks and every inline `span` of its prose.
std::vector<std::string> code_pieces(const std::string& doc) {
  std::vector<std::string> pieces;
  bool fenced = false;
  std::stringstream ss(doc);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.rfind("```", 0) == 0) {
      fenced = !fenced;
      continue;
    }
    if (fenced) {
      pieces.push_back(line);
      continue;
    }
    for (std::size_t open = line.find('`'); open != std::string::npos; open = line.find('`', open)) {
      std::size_t close = line.find('`', open + 1);
      if (close == std::string::npos) break;
      pieces.push_back(line.substr(open + 1, close - open - 1));
      open = close + 1;
    }
  }
  return pieces;
}

// The options `trainsim SUB --help` lists: the names at the start of its option lines ("  -o,--output TEXT").
std::set<std::string> options_of(const std::string& sub) {
  std::set<std::string> names;
  std::stringstream ss(trainsim::testing::run_trainsim(sub + " --help").out);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.rfind("  -", 0) != 0) continue;
    std::string first = line.substr(2, line.find(' ', 2) - 2);
    std::stringstream parts(first);
    std::string name;
    while (std::getline(parts, name, ',')) names.insert(name);
  }
  return names;
}

struct DocCommand {
  std::string where, sub;
  std::vector<std::string> flags;
};

// Every `trainsim SUB ARGS` in `piece` (".../trainsim", or "trainsim" where a command starts; up to a shell
// separator, a comment or launch's "--"), with the flags among its ARGS ("--name=value" as "--name", "[--seq" as "--seq").
std::vector<DocCommand> commands_in(const std::string& piece, const std::string& where) {
  std::vector<std::string> tokens;
  std::stringstream ss(piece);
  for (std::string t; ss >> t;) tokens.push_back(t);
  std::vector<DocCommand> found;
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    const bool path = t.size() > 9 && t.compare(t.size() - 9, 9, "/trainsim") == 0;  // ./build/trainsim
    // A bare "trainsim" is a command where a command starts: first, or after a shell separator or launch's "--".
    const bool starts = i == 0 || tokens[i - 1] == "&&" || tokens[i - 1] == "||" || tokens[i - 1] == ";" ||
                        tokens[i - 1] == "|" || tokens[i - 1] == "--" || tokens[i - 1] == "$";
    if (!path && !(t == "trainsim" && starts)) continue;
    const std::string sub = tokens[i + 1];
    if (sub.empty() || !std::islower(static_cast<unsigned char>(sub[0])) || sub.back() == ':') continue;  // a message
    DocCommand c{where, sub, {}};
    for (std::size_t j = i + 2; j < tokens.size(); ++j) {
      std::string a = tokens[j];
      a.erase(std::remove_if(a.begin(), a.end(), [](char ch) { return ch == '[' || ch == ']'; }), a.end());
      if (a == "&&" || a == "||" || a == ";" || a == "|" || a[0] == '#' || a == "trainsim" || a == "--") break;
      if (a.size() > 1 && a[0] == '-' && !std::isdigit(static_cast<unsigned char>(a[1])) && a != "-") {
        c.flags.push_back(a.substr(0, a.find('=')));
      }
    }
    found.push_back(c);
  }
  return found;
}

}  // namespace

TEST_CASE("the docs' trainsim commands name real sub-commands and options") {
  std::map<std::string, std::set<std::string>> options;
  const std::set<std::string> subs = {"puzzles", "validate", "sim",    "gen",      "convert", "plan",
                                       "replay",  "launch",   "calibrate", "sample", "score", "export"};
  for (const auto& sub : subs) options[sub] = options_of(sub);
  REQUIRE(options["gen"].count("--stages"));
  REQUIRE(options["gen"].count("-o"));
  int commands = 0;
  for (const std::string& file : doc_files()) {
    for (const std::string& piece : code_pieces(read_doc(file))) {
      for (const DocCommand& c : commands_in(piece, file)) {
        CAPTURE(c.where);
        CAPTURE(piece);
        ++commands;
        CHECK(subs.count(c.sub) == 1);
        if (!subs.count(c.sub)) continue;
        for (const std::string& flag : c.flags) {
          CAPTURE(flag);
          CHECK(options[c.sub].count(flag) == 1);
        }
      }
    }
  }
  CHECK(commands > 50);  // the scan sees the docs' commands at all
}

TEST_CASE("trainsim gen --help lists every generator of the registry, in the summary and for KIND") {
  const std::string help = trainsim::testing::run_trainsim("gen --help").out;
  const std::string summary = help.substr(0, help.find("Usage:"));
  const std::string kind_help = help.substr(help.find("KIND TEXT"));  // optional beside --from-megatron/-torchtitan
  auto words = [](std::string text) {  // the words of a help text, split at spaces and punctuation
    for (char& c : text)
      if (c == ',' || c == ';' || c == '(' || c == ')' || c == '\n' || c == '.' || c == ':') c = ' ';
    std::set<std::string> set;
    std::stringstream ss(text);
    for (std::string w; ss >> w;) set.insert(w);
    return set;
  };
  const std::set<std::string> in_summary = words(summary), in_kind_help = words(kind_help);
  for (const std::string& kind : trainsim::generator_kinds()) {
    CAPTURE(kind);
    CHECK(in_summary.count(kind) == 1);
    CHECK(in_kind_help.count(kind) == 1);
  }
  // The README's list of generated layouts names the newer kinds too.
  const std::string readme = read_doc("README.md");
  for (const char* name : {"ZBV", "DualPipeV", "interleaved zero bubble"}) CHECK(readme.find(name) != std::string::npos);
}

TEST_CASE("the docs say what the tool does: OVERLAP_F_B is imported, the recorded example uses puzzle costs") {
  // docs/pytorch-csv.md §4 once listed overlapped forward/backward among the refused actions.
  const std::string csv_doc = read_doc("docs/pytorch-csv.md");
  const std::string limits = csv_doc.substr(csv_doc.find("## 4. Limits"), csv_doc.find("## 5.") - csv_doc.find("## 4. Limits"));
  CHECK(limits.find("overlapped forward/backward, `WAIT_REDUCE_GRAD`") == std::string::npos);
  CHECK(limits.find("`OVERLAP_F_B` cell is imported") != std::string::npos);
  // examples/README.md: one_f_one_b records the puzzle cost model (examples/one_f_one_b.cpp).
  const std::string examples = read_doc("examples/README.md");
  const std::size_t row = examples.find("[one_f_one_b.cpp]");
  REQUIRE(row != std::string::npos);
  const std::string line = examples.substr(row, examples.find('\n', row) - row);
  CHECK(line.find("`cost_model puzzle`") != std::string::npos);
  CHECK(read_doc("examples/one_f_one_b.cpp").find("PuzzleCostModel cost;") != std::string::npos);
  // The exercises' edit-rebuild loop builds the command alone.
  for (const auto& e : std::filesystem::directory_iterator(std::string(TRAINSIM_SOURCE_DIR) + "/puzzles/exercises")) {
    const std::string text = read_doc("puzzles/exercises/" + e.path().filename().string());
    CAPTURE(e.path().filename().string());
    if (text.find("cmake --build build") != std::string::npos)
      CHECK(text.find("cmake --build build --target trainsim") != std::string::npos);
  }
}
