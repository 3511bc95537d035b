// PyTorch pipelining CSV cells: the action types and reading a CSV into cells. Internal to
// pytorch_csv_import.cpp and pytorch_csv_export.cpp (docs/pytorch-csv.md has the format).
#pragma once

#include <string>
#include <tuple>
#include <vector>

namespace trainsim::csv {

/// Action types, as PyTorch names them.
enum class Act { F, B, I, W, SendF, RecvF, SendB, RecvB, Unshard, Reshard, ReduceGrad };

struct ActInfo {
  Act act;
  const char* name;
  bool microbatch;  // the cell carries a microbatch index
};

/// The table of action types, in the order PyTorch documents them.
extern const ActInfo kActs[11];
/// The row of `a`'s table entry.
const ActInfo& info(Act a);
/// F, B, I or W.
bool is_compute_act(Act a);
/// The cell text of an action: "0F1", "1SEND_B0", "2UNSHARD".
std::string cell_text(int stage, Act a, int mb);
/// "F, B, I, W, SEND_F, ..." for error messages.
std::string type_list();

/// One non-empty cell.
struct Action {
  Act act = Act::F;
  int stage = 0;
  int mb = -1;  ///< -1 for the per-stage actions (UNSHARD, RESHARD, REDUCE_GRAD)
  int row = 0;  ///< = rank
  int col = 0;  ///< 0-based
  std::string cell;
};

using Key = std::tuple<Act, int, int>;  // (type, stage, microbatch)
inline Key key_of(const Action& a) { return {a.act, a.stage, a.mb}; }

/// Bytes of `text` up to its last character that is not a blank or a line break.
std::size_t content_size(const std::string& text);
/// The CSV's lines (rows), without line terminators; blank lines at the end are left out. Throws
/// std::invalid_argument naming `source` when there are more than kMaxWorldSize rows.
std::vector<std::string> split_rows(const std::string& text, const std::string& source);
/// `s` without surrounding blanks.
std::string trim(const std::string& s);
/// One row's cells, trimmed (quotes removed).
std::vector<std::string> split_cells(const std::string& row);
/// Throw std::invalid_argument naming the source, row (rank), column and cell.
[[noreturn]] void fail_cell(const std::string& source, int row, int col, const std::string& cell, const std::string& what);
[[noreturn]] void fail_at(const std::string& source, const Action& a, const std::string& what);
[[noreturn]] void fail_row(const std::string& source, int row, const std::string& what);
/// True for a non-empty string of decimal digits.
bool digits(const std::string& s);
/// Parses one non-empty cell. Throws std::invalid_argument (via fail_cell), also for a stage or microbatch
/// number of kMaxCount or more.
Action parse_cell(const std::string& source, const std::string& cell, int row, int col);
/// Parses one non-empty cell into its actions: one, or for PyTorch's `(0F3;5B1)OVERLAP_F_B` (DualPipeV's
/// overlapped forward and backward, `_Action.__repr__` with sub-actions) its compute sub-actions in order.
/// Throws std::invalid_argument (via fail_cell) for a bad cell or a sub-action that is not F, B, I or W.
std::vector<Action> parse_cell_actions(const std::string& source, const std::string& cell, int row, int col);

}  // namespace trainsim::csv
