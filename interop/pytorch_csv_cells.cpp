// PyTorch pipelining CSV cells: the action table and reading rows into cells.
#include "interop/pytorch_csv_cells.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <fmt/format.h>

#include "schedules/input.h"
#include "schedules/limits.h"

namespace trainsim::csv {



const ActInfo kActs[] = {
    {Act::F, "F", true},          {Act::B, "B", true},          {Act::I, "I", true},
    {Act::W, "W", true},          {Act::SendF, "SEND_F", true}, {Act::RecvF, "RECV_F", true},
    {Act::SendB, "SEND_B", true}, {Act::RecvB, "RECV_B", true}, {Act::Unshard, "UNSHARD", false},
    {Act::Reshard, "RESHARD", false}, {Act::ReduceGrad, "REDUCE_GRAD", false},
};

const ActInfo& info(Act a) {
  for (const auto& i : kActs)
    if (i.act == a) return i;
  throw std::logic_error("unknown CSV action");
}

bool is_compute_act(Act a) { return a == Act::F || a == Act::B || a == Act::I || a == Act::W; }

std::string cell_text(int stage, Act a, int mb) {
  return info(a).microbatch ? fmt::format("{}{}{}", stage, info(a).name, mb) : fmt::format("{}{}", stage, info(a).name);
}

std::string type_list() {
  std::string s;
  for (const auto& i : kActs) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}


std::size_t content_size(const std::string& text) {
  std::size_t end = text.find_last_not_of(" \t\r\n");
  return end == std::string::npos ? 0 : end + 1;
}

std::vector<std::string> split_rows(const std::string& text, const std::string& source) {
  const std::size_t end = content_size(text);  // blank lines at the end are no ranks
  std::vector<std::string> rows;
  std::size_t start = 0;
  while (start < end) {
    if (rows.size() == static_cast<std::size_t>(kMaxWorldSize))
      throw std::invalid_argument(fmt::format("{}: the CSV has more than {} rows (ranks), the limit "
                                              "(docs/pytorch-csv.md)",
                                              source, kMaxWorldSize));
    std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos || nl > end) nl = end;
    rows.push_back(text.substr(start, nl - start));
    if (!rows.back().empty() && rows.back().back() == '\r') rows.back().pop_back();
    start = nl + 1;
  }
  return rows;
}

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  std::string t = s.substr(b, e - b);
  if (t.size() >= 2 && t.front() == '"' && t.back() == '"') t = t.substr(1, t.size() - 2);
  return t;
}

std::vector<std::string> split_cells(const std::string& row) {
  std::vector<std::string> cells;
  std::string cur;
  for (char c : row) {
    if (c == ',') {
      cells.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  cells.push_back(trim(cur));
  return cells;
}

[[noreturn]] void fail_cell(const std::string& source, int row, int col, const std::string& cell, const std::string& what) {
  throw std::invalid_argument(
      fmt::format("{}: row {} (rank {}), column {}, cell '{}': {}", source, row + 1, row, col + 1, shown(cell), what));
}

[[noreturn]] void fail_at(const std::string& source, const Action& a, const std::string& what) {
  fail_cell(source, a.row, a.col, a.cell, what);
}

[[noreturn]] void fail_row(const std::string& source, int row, const std::string& what) {
  throw std::invalid_argument(fmt::format("{}: row {} (rank {}): {}", source, row + 1, row, what));
}

bool digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

Action parse_cell(const std::string& source, const std::string& cell, int row, int col) {
  Action a;
  a.row = row;
  a.col = col;
  a.cell = cell;
  std::size_t i = 0;
  while (i < cell.size() && std::isdigit(static_cast<unsigned char>(cell[i]))) ++i;
  if (i == 0)
    fail_cell(source, row, col, cell,
              "expected an action: a stage number, an action type and a microbatch number, like 0F1 or 1SEND_B0");
  if (i > 9 || std::stoi(cell.substr(0, i)) >= kMaxCount)
    fail_cell(source, row, col, cell, fmt::format("the stage number is too large (stages are 0 to {})", kMaxCount - 1));
  std::size_t j = i;
  while (j < cell.size() && (std::isalpha(static_cast<unsigned char>(cell[j])) || cell[j] == '_')) ++j;
  std::string type = cell.substr(i, j - i), rest = cell.substr(j);
  if (type.empty()) fail_cell(source, row, col, cell, fmt::format("no action type after the stage number (expected one of {})", type_list()));
  if (!rest.empty() && !digits(rest))
    fail_cell(source, row, col, cell, fmt::format("unexpected '{}' after the action type", shown(rest)));
  if (rest.size() > 9 || (!rest.empty() && std::stoi(rest) >= kMaxCount))
    fail_cell(source, row, col, cell, fmt::format("the microbatch number is too large (microbatches are 0 to {})", kMaxCount - 1));
  const ActInfo* found = nullptr;
  for (const auto& k : kActs)
    if (type == k.name) found = &k;
  if (!found) fail_cell(source, row, col, cell, fmt::format("unknown action type '{}' (expected one of {})", shown(type), type_list()));
  a.act = found->act;
  a.stage = std::stoi(cell.substr(0, i));
  if (found->microbatch) {
    if (rest.empty())
      fail_cell(source, row, col, cell, fmt::format("{} needs a microbatch number, like {}{}0", type, a.stage, type));
    a.mb = std::stoi(rest);
  } else if (!rest.empty()) {
    fail_cell(source, row, col, cell, fmt::format("{} is per stage and takes no microbatch (write {}{})", type, a.stage, type));
  }
  return a;
}

std::vector<Action> parse_cell_actions(const std::string& source, const std::string& cell, int row, int col) {
  static const std::string kOverlap = ")OVERLAP_F_B";
  if (cell.empty() || cell.front() != '(') return {parse_cell(source, cell, row, col)};
  if (cell.size() <= kOverlap.size() + 1 || cell.compare(cell.size() - kOverlap.size(), kOverlap.size(), kOverlap) != 0)
    fail_cell(source, row, col, cell, "expected an overlapped pair like (0F3;5B1)OVERLAP_F_B");
  const std::string inner = cell.substr(1, cell.size() - kOverlap.size() - 1);
  std::vector<Action> out;
  std::size_t from = 0;
  while (true) {
    std::size_t semi = inner.find(';', from);
    std::string part = trim(inner.substr(from, semi == std::string::npos ? std::string::npos : semi - from));
    if (part.empty()) fail_cell(source, row, col, cell, "an empty action inside OVERLAP_F_B");
    Action a = parse_cell(source, part, row, col);
    if (!is_compute_act(a.act))
      fail_cell(source, row, col, cell, fmt::format("OVERLAP_F_B pairs compute actions (F, B, I, W), not '{}'", part));
    out.push_back(std::move(a));
    if (semi == std::string::npos) break;
    from = semi + 1;
  }
  if (out.size() < 2) fail_cell(source, row, col, cell, "OVERLAP_F_B needs two actions, like (0F3;5B1)OVERLAP_F_B");
  return out;
}

}  // namespace trainsim::csv
