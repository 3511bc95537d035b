#include "schedules/text_format.h"

#include <algorithm>
#include <span>
#include <cctype>
#include <cmath>
#include <charconv>
#include <fstream>
#include <map>
#include <set>
#include <unordered_set>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "schedules/defaults.h"
#include "schedules/input.h"
#include "schedules/limits.h"

namespace trainsim {

namespace {

constexpr OpKind kAllKinds[] = {OpKind::Load,          OpKind::Forward,    OpKind::Backward,  OpKind::BackwardInput,
                                OpKind::BackwardWeight, OpKind::Loss,       OpKind::Update,    OpKind::Accumulate,
                                OpKind::Free,          OpKind::Send,       OpKind::Recv,      OpKind::AllGather,
                                OpKind::ReduceScatter, OpKind::AllReduce,  OpKind::Barrier,   OpKind::Broadcast,
                                OpKind::Reduce,        OpKind::AllToAll};

std::string kind_list() {
  std::string s;
  for (OpKind k : kAllKinds) s += (s.empty() ? "" : ", ") + std::string(op_name(k));
  return s;
}

// A word of a line: a view into the parsed text (no copy per word).
struct Token {
  std::string_view text;
  int col = 0;  // 1-based
};

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// The number `digits` (all decimal digits), or -1 when it is above `max` (however many digits it has).
long long bounded_number(std::string_view digits, long long max) {
  long long v = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || p != digits.data() + digits.size() || v > max) return -1;
  return v;
}

// Reads "0-3,5" into an IdSet of ids up to `max_id` (`noun` names an id in errors: "batch"); throws
// std::invalid_argument. Sorts the runs once: a
// line of a hundred thousand ids costs O(n log n).
IdSet parse_idset(std::string_view s, int max_id, std::string_view noun) {
  // The common case, one id or one range ("3", "0-63"), without a list of runs.
  if (s.find(',') == std::string_view::npos && !s.empty()) {
    auto dash = s.find('-');
    std::string_view lo_text = s.substr(0, dash), hi_text = dash == std::string_view::npos ? s : s.substr(dash + 1);
    if (all_digits(lo_text) && all_digits(hi_text)) {
      long long lo = bounded_number(lo_text, max_id), hi = bounded_number(hi_text, max_id);
      if (lo >= 0 && hi >= lo) return IdSet::range(static_cast<int>(lo), static_cast<int>(hi) + 1);
    }
  }  // (anything else, errors included, takes the general path)
  std::vector<std::pair<int, int>> runs;
  std::size_t start = 0;
  while (!s.empty()) {
    std::size_t comma = s.find(',', start);
    std::string_view part = s.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    auto dash = part.find('-');
    auto num = [&](std::string_view n) {
      if (!all_digits(n)) throw std::invalid_argument(fmt::format("'{}' is not a set of ids like 0-3,5", shown(s)));
      long long v = bounded_number(n, max_id);
      if (v < 0) throw std::invalid_argument(fmt::format("{} {} is too large (at most {})", noun, shown(n), max_id));
      return static_cast<int>(v);
    };
    if (dash == std::string_view::npos) {
      int id = num(part);
      runs.emplace_back(id, id + 1);
    } else {
      int lo = num(part.substr(0, dash)), hi = num(part.substr(dash + 1));
      if (hi < lo) throw std::invalid_argument(fmt::format("range {} runs backwards", shown(part)));
      runs.emplace_back(lo, hi + 1);
    }
    if (comma == std::string_view::npos || comma + 1 == s.size()) break;  // (a trailing comma is allowed)
    start = comma + 1;
  }
  return IdSet::from_runs(std::move(runs));
}

class Parser {
 public:
  // Lines are views into `text`, which must outlive the parser (as std::getline splits: on '\n' only).
  Parser(const std::string& text, std::string source) : source_(std::move(source)) {
    std::string_view rest(text);
    while (!rest.empty()) {
      const std::size_t nl = rest.find('\n');
      lines_.push_back(rest.substr(0, nl));
      if (nl == std::string_view::npos) break;
      rest.remove_prefix(nl + 1);
    }
    where_prefix_ = source_ + ":";
  }

  Schedule parse() {
    Schedule s;
    std::set<std::string, std::less<>> seen;
    int current_rank = -1;
    bool header_done = false;
    for (line_no_ = 1; line_no_ <= static_cast<int>(lines_.size()); ++line_no_) {
      tokenize(lines_[line_no_ - 1], toks_);
      const std::vector<Token>& toks = toks_;
      if (toks.empty()) continue;
      const std::string_view key = toks[0].text;
      if (seen.empty()) {
        if (key != "trainsim-schedule")
          fail(toks[0], fmt::format("expected the format line 'trainsim-schedule 1', got '{}'", shown(key)));
        expect_count(toks, 2);
        int v = integer(toks[1], "a format version");
        if (v < 1 || v > 3)
          fail(toks[1], fmt::format("unsupported format version {} (this trainsim reads versions 1 to 3)", v));
        s.header.version = v;
        seen.emplace(key);
        continue;
      }
      if (key == "rank") {
        if (!header_done) {
          check_header(s, seen, toks[0]);
          header_done = true;
        }
        expect_count(toks, 2);
        int r = integer(toks[1], "a rank");
        if (r != current_rank + 1)
          fail(toks[1], current_rank + 1 < s.header.world_size
                            ? fmt::format("expected 'rank {}' (ranks are listed in order), got rank {}", current_rank + 1, r)
                            : fmt::format("rank {} is out of range: world_size is {}", r, s.header.world_size));
        if (r >= s.header.world_size)
          fail(toks[1], fmt::format("rank {} is out of range: world_size is {}", r, s.header.world_size));
        current_rank = r;
        s.ranks.emplace_back();  // allocated as listed: a header's world_size alone costs nothing
        continue;
      }
      if (!header_done) {
        header_line(s, seen, toks);
        continue;
      }
      if (current_rank < 0) fail(toks[0], "expected 'rank N' before the ops");
      s.ranks.back().push_back(op_line(s.header, current_rank, toks));
    }
    if (seen.empty()) throw ParseError(fmt::format("{}:1:1: empty schedule: expected 'trainsim-schedule 1'", source_));
    if (!header_done) {
      Token end{"", 1};
      line_no_ = static_cast<int>(lines_.size());
      check_header(s, seen, end);
    }
    if (current_rank + 1 != s.header.world_size)
      throw ParseError(fmt::format("{}:{}:1: expected 'rank {}': world_size is {} but the file lists ops for ranks 0..{}",
                                   source_, lines_.size(), current_rank + 1, s.header.world_size, current_rank));
    return s;
  }

 private:
  [[noreturn]] void fail(const Token& t, const std::string& what) const {
    throw ParseError(fmt::format("{}:{}:{}: {}", source_, line_no_, t.col, what));
  }

  // The words of `line` into `out` (reused from line to line: no allocation per line).
  static void tokenize(std::string_view line, std::vector<Token>& out) {
    out.clear();
    std::size_t i = 0;
    while (i < line.size()) {
      if (line[i] == '#') break;
      if (std::isspace(static_cast<unsigned char>(line[i]))) {
        ++i;
        continue;
      }
      std::size_t j = i;
      while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j])) && line[j] != '#') ++j;
      out.push_back(Token{line.substr(i, j - i), static_cast<int>(i) + 1});
      i = j;
    }
  }

  void expect_count(const std::vector<Token>& toks, std::size_t n) const {
    if (toks.size() < n) fail(toks.back(), fmt::format("'{}' needs {} value{}", shown(toks[0].text), n - 1, n == 2 ? "" : "s"));
    if (toks.size() > n) fail(toks[n], fmt::format("unexpected '{}' after '{}'", shown(toks[n].text), shown(toks[0].text)));
  }

  // A non-negative integer up to `max` (docs/schedule-format.md, Limits); `what` names it in errors.
  int integer(const Token& t, std::string_view what, int max = kMaxNumber) const {
    return number(t, t.text, what, max);
  }

  // The integer `digits`, part of token `t`.
  int number(const Token& t, std::string_view digits, std::string_view what, int max) const {
    if (!all_digits(digits)) fail(t, fmt::format("expected {} (a non-negative integer), got '{}'", what, shown(digits)));
    long long v = bounded_number(digits, max);
    if (v < 0) fail(t, fmt::format("{} is too large for {} (at most {})", shown(digits), what, max));
    return static_cast<int>(v);
  }

  void header_line(Schedule& s, std::set<std::string, std::less<>>& seen, const std::vector<Token>& toks) {
    const std::string_view key = toks[0].text;
    ScheduleHeader& h = s.header;
    if (key != "group" && seen.count(key)) fail(toks[0], fmt::format("'{}' is given twice", key));
    if (key == "world_size" || key == "layers" || key == "microbatches") {
      expect_count(toks, 2);
      int v = integer(toks[1], key, key == "world_size" ? kMaxWorldSize : kMaxCount);
      if (v < 1) fail(toks[1], fmt::format("{} must be at least 1", key));
      (key == "world_size" ? h.world_size : key == "layers" ? h.layers : h.microbatches) = v;
    } else if (key == "cost_model") {
      expect_count(toks, 2);
      if (toks[1].text != "puzzle" && toks[1].text != "unit" && toks[1].text != "hardware")
        fail(toks[1], fmt::format("unknown cost model '{}' (expected puzzle, unit or hardware)", shown(toks[1].text)));
      h.cost_model = std::string(toks[1].text);
    } else if (is_hardware_key(key)) {
      hardware_line(s, seen, toks);
    } else if (key == "p2p") {
      expect_count(toks, 2);
      if (toks[1].text == "one-slot") h.p2p = P2PMode::OneSlotPerDestination;
      else if (toks[1].text == "per-pair") h.p2p = P2PMode::PerPairChannel;
      else fail(toks[1], fmt::format("expected one-slot or per-pair, got '{}'", shown(toks[1].text)));
    } else if (key == "stage_map") {
      need(seen, {"world_size", "layers"}, toks[0]);
      if (static_cast<int>(toks.size()) - 1 != h.layers)
        fail(toks[0], fmt::format("stage_map needs one rank per layer ({}), got {}", h.layers, toks.size() - 1));
      for (std::size_t i = 1; i < toks.size(); ++i) h.stage_map.push_back(rank_value(toks[i], h));
    } else if (key == "layout") {
      need(seen, {"layers"}, toks[0]);
      expect_count(toks, 2);
      try {
        h.layout = hw::StageLayout::parse(toks[1].text);
      } catch (const hw::LayoutError& e) {
        Token at = toks[1];
        at.col += std::max(e.position, 1) - 1;
        fail(at, fmt::format("layout '{}': {}", shown(toks[1].text), e.what()));
      }
      if (h.layout->layers() != h.layers)
        fail(toks[1], fmt::format("the layout has {} stages but the schedule has {} layers (one stage per layer)",
                                  h.layout->layers(), h.layers));
    } else if (key == "expert_load") {
      // The relative token load of each expert slice (version 3; docs/schedule-format.md, "Mixture of Experts").
      if (h.version < 3)
        fail(toks[0], "expert_load needs format version 3 (write 'trainsim-schedule 3' on the first line)");
      if (toks.size() < 2) fail(toks[0], "expert_load needs one load per expert slice");
      if (toks.size() - 1 > static_cast<std::size_t>(Tensor::kMaxEpSize))
        fail(toks[0], fmt::format("expert_load gives {} loads; the EP degree is at most {}", toks.size() - 1,
                                  Tensor::kMaxEpSize));
      for (std::size_t i = 1; i < toks.size(); ++i) {
        double v = 0;
        const std::string_view t = toks[i].text;
        auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec != std::errc() || p != t.data() + t.size() || !std::isfinite(v) || v <= 0 || v > 1e6)
          fail(toks[i], fmt::format("expected a relative load above 0 (at most 1e6), got '{}'", shown(t)));
        h.expert_load.push_back(v);
      }
    } else if (key == "group") {
      need(seen, {"world_size"}, toks[0]);
      if (toks.size() < 3) fail(toks[0], "expected 'group ID RANK...'");
      int id = integer(toks[1], "a group id");
      if (id != static_cast<int>(h.groups.size()) + 1)
        fail(toks[1], fmt::format("expected group {} next (groups are numbered 1, 2, ... in order)", h.groups.size() + 1));
      std::vector<int> members;
      std::size_t first = 2;
      std::string name;
      if (std::isalpha(static_cast<unsigned char>(toks[2].text[0]))) {
        // A group's name (version 2): a letter, then letters, digits, '_', '.' or '-'; at most 64 characters.
        const std::string_view n = toks[2].text;
        if (h.version < 2) fail(toks[2], "group names need format version 2 (write 'trainsim-schedule 2' on the first line)");
        const bool ok = n.size() <= 64 && std::all_of(n.begin(), n.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
        });
        if (!ok) fail(toks[2], fmt::format("a group name is a letter then letters, digits, '_', '.' or '-' (at most 64), not '{}'", shown(n)));
        if (!group_names_seen_.insert(std::string(n)).second)
          fail(toks[2], fmt::format("group name '{}' is given twice", shown(n)));
        if (toks.size() < 4) fail(toks[0], "expected 'group ID NAME RANK...'");
        name = n;
        first = 3;
      }
      for (std::size_t i = first; i < toks.size(); ++i) members.push_back(rank_value(toks[i], h));
      // A rank listed twice, found by sorting (n log n: a group of 131,072 ranks is one line), reported at its
      // second mention.
      std::vector<int> sorted = members;
      std::sort(sorted.begin(), sorted.end());
      if (auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end()) {
        const auto at = std::find(std::find(members.begin(), members.end(), *twice) + 1, members.end(), *twice);
        fail(toks[first + static_cast<std::size_t>(at - members.begin())],
             fmt::format("rank {} is listed twice in group {}", *twice, id));
      }
      h.groups.push_back(members);
      // Names are kept only once one group has one, so a file without names has an empty list (as a
      // generator's header without names).
      if (!name.empty()) h.group_names.resize(h.groups.size() - 1);
      if (!name.empty() || !h.group_names.empty()) h.group_names.push_back(name);
      group_name_at_.push_back({line_no_, toks[2]});  // where a TP group conflict is reported (check_header)
    } else {
      fail(toks[0], fmt::format("unknown header field '{}' (expected world_size, layers, microbatches, cost_model, "
                                "model, device, network, microbatch_size, seq, recompute, attention, elementwise, fp8, "
                                "context_parallel, tp_overlap, moe_dispatcher, expert_gemm, p2p, stage_map, layout, expert_load, "
                                "group or rank)",
                                shown(key)));
    }
    seen.emplace(key);
  }

  static bool is_hardware_key(std::string_view key) {
    return key == "model" || key == "device" || key == "network" || key == "microbatch_size" || key == "seq" ||
           key == "recompute" || key == "attention" || key == "elementwise" || key == "fp8" || key == "context_parallel" ||
           key == "tp_overlap" || key == "moe_dispatcher" || key == "expert_gemm";
  }

  // One line of the `cost_model hardware` block: kept until the header ends (check_header builds the setting).
  void hardware_line(const Schedule& s, const std::set<std::string, std::less<>>& seen, const std::vector<Token>& toks) {
    if (!seen.count("cost_model") || s.header.cost_model != "hardware")
      fail(toks[0], fmt::format("'{}' belongs to the 'cost_model hardware' block (after that line)", toks[0].text));
    const std::string_view key = toks[0].text;
    if (key == "model" || key == "device" || key == "network") {
      if (toks.size() < 2) fail(toks[0], fmt::format("'{}' needs a preset name (and key=value overrides)", key));
    } else {
      expect_count(toks, 2);
    }
    hardware_lines_[std::string(key)] = {toks, line_no_};
  }

  // The hardware setting from the block's lines; errors point at the line and word.
  void build_hardware(Schedule& s, const Token& at) {
    ScheduleHeader& h = s.header;
    for (const char* k : {"model", "device", "network"})
      if (!hardware_lines_.count(k)) fail(at, fmt::format("cost_model hardware needs a '{}' line", k));
    hw::HardwareSetting hs;
    const int saved_line = line_no_;
    auto words = [&](const char* key) {
      std::vector<std::string> w;
      const auto& toks = hardware_lines_.at(key).first;
      for (std::size_t i = 1; i < toks.size(); ++i) w.emplace_back(toks[i].text);
      return w;
    };
    auto guarded = [&](const char* key, auto&& f) {
      auto it = hardware_lines_.find(key);
      if (it == hardware_lines_.end()) return;
      line_no_ = it->second.second;
      try {
        f(it->second.first);
      } catch (const hw::SpecError& e) {
        fail(it->second.first[1], e.what());
      }
    };
    guarded("model", [&](const auto&) { hs.model = hw::model_from_words(words("model"), "model"); });
    guarded("device", [&](const auto&) { hs.device = hw::device_from_words(words("device"), "device"); });
    guarded("network", [&](const auto&) { hs.network = hw::network_from_words(words("network"), "network"); });
    guarded("microbatch_size", [&](const auto& t) {
      hs.microbatch_size = integer(t[1], "a number of sequences");
      if (hs.microbatch_size < 1) fail(t[1], "microbatch_size must be at least 1");
    });
    guarded("seq", [&](const auto& t) {
      hs.seq = integer(t[1], "a sequence length");
      if (hs.seq < 1) fail(t[1], "seq must be at least 1");
    });
    guarded("recompute", [&](const auto& t) { hs.recompute = hw::recompute_from_name(std::string(t[1].text), "recompute"); });
    guarded("attention", [&](const auto& t) { hs.attention = hw::attention_from_name(std::string(t[1].text), "attention"); });
    guarded("elementwise", [&](const auto& t) {
      hs.elementwise = hw::elementwise_from_name(std::string(t[1].text), "elementwise");
    });
    guarded("fp8", [&](const auto& t) {
      hs.fp8 = true;
      if (t[1].text == "linear+all-gather") hs.fp8_all_gather = true;
      else if (t[1].text != "linear") fail(t[1], "fp8: expected linear or linear+all-gather");
    });
    guarded("context_parallel", [&](const auto& t) {
      hs.context_parallel = integer(t[1], "a context-parallel degree");
      if (hs.context_parallel < 1) fail(t[1], "context_parallel must be at least 1");
    });
    guarded("tp_overlap", [&](const auto& t) { hs.tp_overlap = hw::tp_overlap_from_name(std::string(t[1].text), "tp_overlap"); });
    guarded("moe_dispatcher", [&](const auto& t) {
      hs.moe_dispatcher = hw::moe_dispatcher_from_name(std::string(t[1].text), "moe_dispatcher");
    });
    guarded("expert_gemm", [&](const auto& t) {
      hs.expert_gemm = hw::expert_gemm_from_name(std::string(t[1].text), "expert_gemm");
    });
    guarded("model", [&](const auto& t) {
      if (h.layout && h.layout->blocks() != hs.model.blocks)
        fail(t[1], fmt::format("the model has {} blocks but the layout '{}' holds {} (set blocks={} or change the "
                               "layout)",
                               hs.model.blocks, shown(h.layout->str()), h.layout->blocks(), h.layout->blocks()));
      if (!h.layout && hs.model.blocks < h.layers)
        fail(t[1], fmt::format("the model has {} blocks but the schedule has {} layers (each layer needs a block)",
                               hs.model.blocks, h.layers));
    });
    for (const char* key : {"context_parallel", "fp8", "attention"})
      guarded(key, [&](const auto&) { hs.validate(key); });
    line_no_ = saved_line;
    h.hardware = hs;
  }

  void need(const std::set<std::string, std::less<>>& seen, std::initializer_list<const char*> keys, const Token& t) const {
    for (const char* k : keys)
      if (!seen.count(k)) fail(t, fmt::format("'{}' must come after '{}'", t.text, k));
  }

  void check_header(Schedule& s, const std::set<std::string, std::less<>>& seen, const Token& at) {
    for (const char* k : {"world_size", "layers", "microbatches"})
      if (!seen.count(k)) fail(at, fmt::format("the header has no '{}' line", k));
    check_tp_groups(s.header);
    if (s.header.cost_model == "hardware") build_hardware(s, at);
    s.ranks.clear();  // filled rank by rank as the file lists them
  }

  // No rank in two TP groups (tp_groups_by_rank, one pass over the groups); the error points at the later
  // group's name, on its line.
  void check_tp_groups(const ScheduleHeader& h) {
    try {
      tp_groups_by_rank(h);
    } catch (const TpGroupConflict& e) {
      const auto& [line, name] = group_name_at_.at(e.second - 1);
      line_no_ = line;
      fail(name, e.what());
    }
  }

  int rank_value(const Token& t, const ScheduleHeader& h) const {
    int r = integer(t, "a rank");
    if (r >= h.world_size) fail(t, fmt::format("rank {} is out of range: world_size is {}", r, h.world_size));
    return r;
  }

  Tensor tensor(const Token& t, const ScheduleHeader& h) const {
    Tensor x;
    try {
      x = parse_tensor(t.text);
    } catch (const std::invalid_argument& e) {
      fail(t, e.what());
    }
    if (x.tp_size != 1 && h.version < 2)
      fail(t, fmt::format("{}: TP slices and partial sums need format version 2 (write 'trainsim-schedule 2' on the "
                          "first line)",
                          shown(t.text)));
    if ((x.expert() || x.route != Route::None) && h.version < 3)
      fail(t, fmt::format("{}: expert slices and routed tokens need format version 3 (write 'trainsim-schedule 3' on "
                          "the first line)",
                          shown(t.text)));
    if (x.expert() && !h.expert_load.empty() && x.ep_size != h.expert_load.size())
      fail(t, fmt::format("{} is a slice of an EP degree of {}, but expert_load gives the loads of {} slices",
                          shown(t.text), x.ep_size, h.expert_load.size()));
    bool per_layer = x.kind == TensorKind::Weight || x.kind == TensorKind::OptState || x.kind == TensorKind::WeightGrad;
    int max_layer = per_layer ? h.layers - 1 : h.layers;
    if (x.layer > max_layer) fail(t, fmt::format("{}: layer {} is out of range 0..{}", shown(t.text), x.layer, max_layer));
    if (!x.batches.empty() && x.batches.runs().back().second > h.microbatches)
      fail(t, fmt::format("{}: batch {} is out of range 0..{}", shown(t.text), x.batches.runs().back().second - 1, h.microbatches - 1));
    return x;
  }

  Op op_line(const ScheduleHeader& h, int rank, const std::vector<Token>& toks) {
    Op op;
    op.rank = rank;
    char digits[16];
    const auto end = std::to_chars(digits, digits + sizeof digits, line_no_).ptr;
    op.where.reserve(where_prefix_.size() + (end - digits));
    op.where.append(where_prefix_).append(digits, end);
    auto kind = op_kind_from_name(toks[0].text);
    if (!kind) fail(toks[0], fmt::format("unknown op '{}' (expected one of: {})", shown(toks[0].text), kind_list()));
    op.kind = *kind;
    if (is_rooted(op.kind) && h.version < 2)
      fail(toks[0], fmt::format("{} needs format version 2 (write 'trainsim-schedule 2' on the first line)", op_name(op.kind)));
    if (op.kind == OpKind::AllToAll && h.version < 3)
      fail(toks[0], "all-to-all needs format version 3 (write 'trainsim-schedule 3' on the first line)");
    if (op.kind == OpKind::Loss) op.layer = h.layers;
    if (op.kind == OpKind::Recv) op.peer = -2;  // must be given
    enum { Args, Reads, Writes } part = Args;
    // Each argument at most once: `broadcast L0 root 1 root 0` contradicts itself rather than letting the last win.
    bool has_layer = false, has_batches = false, has_peer = false, has_group = false, has_stream = false;
    auto once = [&](bool& given, const Token& t, const char* what) {
      if (given) fail(t, fmt::format("{} is given twice in one {} op", what, op_name(op.kind)));
      given = true;
    };
    for (std::size_t i = 1; i < toks.size(); ++i) {
      const Token& t = toks[i];
      if (t.text == ":") {
        if (part != Args) fail(t, "':' (the tensors read) must come before '->' and only once");
        part = Reads;
        continue;
      }
      if (t.text == "->") {
        if (part == Writes) fail(t, "'->' is given twice");
        part = Writes;
        continue;
      }
      if (part != Args) {
        (part == Reads ? op.reads : op.writes).push_back(tensor(t, h));
        continue;
      }
      if (t.text.size() > 1 && t.text[0] == 'L' && all_digits(t.text.substr(1))) {
        once(has_layer, t, "the layer");
        op.layer = number(t, std::string_view(t.text).substr(1), "a layer", kMaxCount);
        if (op.kind == OpKind::Loss ? op.layer != h.layers : op.layer >= h.layers)
          fail(t, op.kind == OpKind::Loss ? fmt::format("the loss is at layer {} (the last), not {}", h.layers, op.layer)
                                          : fmt::format("layer {} is out of range 0..{}", op.layer, h.layers - 1));
      } else if (t.text.front() == '{') {
        once(has_batches, t, "the batch set");
        if (t.text.size() < 2 || t.text.back() != '}')
          fail(t, fmt::format("expected a batch set like {{0-3}}, got '{}'", shown(t.text)));
        try {
          op.batches = parse_idset(std::string_view(t.text).substr(1, t.text.size() - 2), kMaxCount - 1, "batch");
        } catch (const std::invalid_argument& e) {
          fail(t, e.what());
        }
        if (!op.batches.empty() && op.batches.runs().back().second > h.microbatches)
          fail(t, fmt::format("batch {} is out of range 0..{}", op.batches.runs().back().second - 1, h.microbatches - 1));
      } else if ((t.text == "to" || t.text == "from" || t.text == "group" || t.text == "stream" || t.text == "root")) {
        if (i + 1 >= toks.size()) fail(t, fmt::format("'{}' needs a value", t.text));
        const Token& v = toks[++i];
        if (t.text == "to") {
          if (op.kind != OpKind::Send) fail(t, "'to' belongs to send");
          once(has_peer, t, "'to'");
          op.peer = rank_value(v, h);
        } else if (t.text == "from") {
          if (op.kind != OpKind::Recv) fail(t, "'from' belongs to recv");
          once(has_peer, t, "'from'");
          op.peer = v.text == "any" ? -1 : rank_value(v, h);
        } else if (t.text == "group") {
          if (!is_collective(op.kind)) fail(t, "'group' belongs to collectives");
          once(has_group, t, "'group'");
          op.group = integer(v, "a group id");
          if (op.group > static_cast<int>(h.groups.size()))
            fail(v, fmt::format("group {} is not defined in the header", op.group));
        } else if (t.text == "root") {
          if (!is_rooted(op.kind)) fail(t, "'root' belongs to broadcast and reduce");
          once(has_peer, t, "'root'");
          op.peer = rank_value(v, h);
        } else {
          once(has_stream, t, "'stream'");
          op.stream = integer(v, "a stream");
        }
      } else {
        fail(t, fmt::format("unexpected '{}' (expected L<layer>, {{batches}}, to, from, group, root, stream, ':' or '->')",
                            shown(t.text)));
      }
    }
    if (op.kind == OpKind::Send && op.peer < 0) fail(toks[0], "send needs 'to RANK'");
    if (is_rooted(op.kind) && op.peer < 0) fail(toks[0], fmt::format("{} needs 'root RANK'", op_name(op.kind)));
    if (op.kind == OpKind::Recv && op.peer == -2) fail(toks[0], "recv needs 'from RANK' (or 'from any')");
    if ((op.kind == OpKind::Send && op.peer == rank) || (op.kind == OpKind::Recv && op.peer == rank))
      fail(toks[0], fmt::format("rank {} cannot {} itself", rank, op.kind == OpKind::Send ? "send to" : "receive from"));
    bool needs_layer = is_compute(op.kind) && op.kind != OpKind::Loss;
    if (needs_layer && op.layer < 0) fail(toks[0], fmt::format("{} needs a layer (L<n>)", op_name(op.kind)));
    bool needs_batches = needs_layer && op.kind != OpKind::Update;
    // (The batches of an op that lists its reads come from its activation; a ':' with nothing after it lists
    // none, and would print as a batch set '{}' that does not parse back.)
    if ((needs_batches || op.kind == OpKind::Loss) && op.batches.empty() && op.reads.empty())
      fail(toks[0], fmt::format("{} needs a batch set ({{0-3}})", op_name(op.kind)));
    if (op.batches.empty() && (needs_batches || op.kind == OpKind::Loss))
      for (const Tensor& t : op.reads)
        if (t.kind == TensorKind::Activation) op.batches = t.batches;
    fill_defaults(op, h.layers, h.microbatches);
    return op;
  }

  std::string source_;
  std::string where_prefix_;  // "file.sched:", each op's `where` without its line number
  std::map<std::string, std::pair<std::vector<Token>, int>> hardware_lines_;  // key -> (tokens, line)
  std::vector<std::pair<int, Token>> group_name_at_;  // group id - 1 -> (line, the token after its id)
  std::unordered_set<std::string> group_names_seen_;  // the names given so far (a name given twice is refused)
  std::vector<std::string_view> lines_;
  std::vector<Token> toks_;  // the current line's words
  int line_no_ = 0;
};

// The `cost_model hardware` block, indented under its line, every field given (canonical); attention, elementwise,
// fp8, context_parallel, tp_overlap, moe_dispatcher and expert_gemm only when they are not the default (flash, fused,
// none, 1, backward, nccl, per-expert), so that older schedules print as they did.
std::string print_hardware_block(const hw::HardwareSetting& hs) {
  std::string out =
      fmt::format("  model {}\n  device {}\n  network {}\n  microbatch_size {}\n  seq {}\n  recompute {}\n",
                  hw::spec_text(hs.model), hw::spec_text(hs.device), hw::spec_text(hs.network), hs.microbatch_size,
                  hs.seq_len(), hw::recompute_name(hs.recompute));
  if (hs.attention != hw::Attention::Flash) out += fmt::format("  attention {}\n", hw::attention_name(hs.attention));
  if (hs.elementwise != hw::Elementwise::Fused)
    out += fmt::format("  elementwise {}\n", hw::elementwise_name(hs.elementwise));
  if (hs.fp8) out += hs.fp8_all_gather ? "  fp8 linear+all-gather\n" : "  fp8 linear\n";
  if (hs.context_parallel != 1) out += fmt::format("  context_parallel {}\n", hs.context_parallel);
  if (hs.tp_overlap != hw::TpOverlap::Backward) out += fmt::format("  tp_overlap {}\n", hw::tp_overlap_name(hs.tp_overlap));
  if (hs.moe_dispatcher != hw::MoeDispatcher::Nccl)
    out += fmt::format("  moe_dispatcher {}\n", hw::moe_dispatcher_name(hs.moe_dispatcher));
  if (hs.expert_gemm != hw::ExpertGemm::PerExpert)
    out += fmt::format("  expert_gemm {}\n", hw::expert_gemm_name(hs.expert_gemm));
  return out;
}

std::string tensors(std::span<const Tensor> ts) {
  std::string s;
  for (const auto& t : ts) s += " " + t.str();
  return s;
}

}  // namespace

std::optional<OpKind> op_kind_from_name(std::string_view name) {
  for (OpKind k : kAllKinds)
    if (name == op_name(k)) return k;
  return std::nullopt;
}

Tensor parse_tensor(std::string_view text) {
  Tensor t;
  std::size_t i = 0;
  auto starts = [&](std::string_view p) { return text.substr(0, p.size()) == p; };
  if (starts("dW")) t.kind = TensorKind::WeightGrad, i = 2;
  else if (starts("dA")) t.kind = TensorKind::ActivationGrad, i = 2;
  else if (starts("W")) t.kind = TensorKind::Weight, i = 1;
  else if (starts("O")) t.kind = TensorKind::OptState, i = 1;
  else if (starts("A")) t.kind = TensorKind::Activation, i = 1;
  else throw std::invalid_argument(fmt::format("expected a tensor (W, O, A, dA or dW then a layer), got '{}'", shown(text)));
  std::size_t j = i;
  while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
  if (j == i) throw std::invalid_argument(fmt::format("expected a layer number after '{}' in '{}'", text.substr(0, i), shown(text)));
  long long layer = bounded_number(text.substr(i, j - i), kMaxCount);
  if (layer < 0)
    throw std::invalid_argument(fmt::format("layer {} is too large (at most {}) in '{}'", shown(text.substr(i, j - i)),
                                            kMaxCount, shown(text)));
  t.layer = static_cast<int>(layer);
  i = j;
  bool batched = t.kind != TensorKind::Weight && t.kind != TensorKind::OptState;
  if (batched) {
    if (i >= text.size() || text[i] != '{')
      throw std::invalid_argument(fmt::format("{} needs a batch set, like {}{}{{0-3}}", shown(text), short_name(t.kind), t.layer));
    auto close = text.find('}', i);
    if (close == std::string_view::npos) throw std::invalid_argument(fmt::format("unclosed '{{' in '{}'", shown(text)));
    t.batches = parse_idset(text.substr(i + 1, close - i - 1), kMaxCount - 1, "batch");
    i = close + 1;
  }
  if (i < text.size() && text[i] == '<' && text.substr(i, 2) != "<e" && text.substr(i, 8) != "<routed>") {
    // A TP slice "<j/t>" or a partial sum "<+S/t>" (docs/schedule-format.md, version 2).
    auto close = text.find('>', i);
    auto slash = text.find('/', i);
    if (close == std::string_view::npos || slash == std::string_view::npos || slash > close)
      throw std::invalid_argument(fmt::format("expected a TP slice like <1/4> or a partial sum like <+1/4> in '{}'", shown(text)));
    std::size_t from = i + 1;
    const bool partial = from < slash && text[from] == '+';
    if (partial) ++from;
    std::string_view n = text.substr(slash + 1, close - slash - 1);
    long long count = all_digits(n) ? bounded_number(n, Tensor::kMaxTpSize) : -1;
    if (count < 2)
      throw std::invalid_argument(fmt::format("expected a TP degree from 2 to {} after '/' in '{}'", Tensor::kMaxTpSize, shown(text)));
    if (from == slash)
      throw std::invalid_argument(fmt::format("expected TP slice numbers before '/' (<1/4>, <+0-3/4>) in '{}'", shown(text)));
    IdSet slices = parse_idset(text.substr(from, slash - from), Tensor::kMaxTpSize - 1, "TP slice");
    if (slices.empty() || slices.runs().back().second > count)
      throw std::invalid_argument(fmt::format("TP slices {} are out of range for a TP degree of {} in '{}'",
                                              shown(slices.str()), count, shown(text)));
    if (!partial && slices.size() != 1)
      throw std::invalid_argument(fmt::format("a tensor holds one TP slice, not {} (a partial sum is written <+{}/{}>) in '{}'",
                                              shown(slices.str()), shown(slices.str()), count, shown(text)));
    if (partial && t.kind != TensorKind::Activation && t.kind != TensorKind::ActivationGrad)
      throw std::invalid_argument(fmt::format("only activations and activation grads are partial sums, in '{}'", shown(text)));
    std::uint64_t bits = 0;
    for (const auto& [lo, hi] : slices.runs())
      for (int j = lo; j < hi; ++j) bits |= std::uint64_t{1} << j;
    if (partial && bits == all_tp_slices(static_cast<int>(count)))
      throw std::invalid_argument(fmt::format("the partial sum of every TP slice is the complete tensor: write it without "
                                              "<+...> in '{}'",
                                              shown(text)));
    t.tp_size = static_cast<std::uint16_t>(count);
    t.tp_slices = bits;
    t.partial = partial;
    i = close + 1;
  }
  if (text.substr(i, 8) == "<routed>") {
    // Tokens routed to experts that have not run (version 3).
    if (t.kind != TensorKind::Activation && t.kind != TensorKind::ActivationGrad)
      throw std::invalid_argument(fmt::format("only activations and activation grads are routed, in '{}'", shown(text)));
    t.route = Route::Routed;
    i += 8;
  } else if (text.substr(i, 2) == "<e") {
    // An expert slice "<ej/e>", or for tokens the experts' output "<ej/e:out>" (version 3).
    auto close = text.find('>', i);
    auto slash = text.find('/', i);
    if (close == std::string_view::npos || slash == std::string_view::npos || slash > close)
      throw std::invalid_argument(fmt::format("expected an expert slice like <e1/4> (or <e1/4:out>) in '{}'", shown(text)));
    std::string_view count_text = text.substr(slash + 1, close - slash - 1);
    const bool out = count_text.size() > 4 && count_text.substr(count_text.size() - 4) == ":out";
    if (out) count_text.remove_suffix(4);
    std::string_view index_text = text.substr(i + 2, slash - i - 2);
    long long count = all_digits(count_text) ? bounded_number(count_text, Tensor::kMaxEpSize) : -1;
    long long index = all_digits(index_text) ? bounded_number(index_text, Tensor::kMaxEpSize) : -1;
    if (count < 1)
      throw std::invalid_argument(fmt::format("expected an EP degree from 1 to {} after '/' in '{}'", Tensor::kMaxEpSize,
                                              shown(text)));
    if (index < 0 || index >= count)
      throw std::invalid_argument(fmt::format("expected an expert slice from 0 to {} after '<e' in '{}'", count - 1,
                                              shown(text)));
    const bool tokens = t.kind == TensorKind::Activation || t.kind == TensorKind::ActivationGrad;
    if (out && !tokens)
      throw std::invalid_argument(fmt::format("only the experts' output tokens are written <e...:out>, in '{}'", shown(text)));
    // (with expert tensor parallelism the experts' output is a partial sum over the expert-TP group)
    if (tokens && t.tp_size != 1 && !(out && t.partial))
      throw std::invalid_argument(fmt::format("tokens of an expert slice are not TP slices (only the experts' output "
                                              "may be a partial sum, <+k/t><ej/e:out>), in '{}'",
                                              shown(text)));
    t.ep_size = static_cast<std::uint16_t>(count);
    t.ep_index = static_cast<std::uint16_t>(index);
    if (tokens) t.route = out ? Route::ExpertOut : Route::ExpertIn;
    i = close + 1;
  }
  if (i < text.size() && text[i] == '[') {
    auto close = text.find(']', i);
    auto slash = text.find('/', i);
    if (close == std::string_view::npos || slash == std::string_view::npos || slash > close)
      throw std::invalid_argument(fmt::format("expected shards like [0/4] in '{}'", shown(text)));
    t.shards = parse_idset(text.substr(i + 1, slash - i - 1), kMaxCount - 1, "shard");
    std::string_view n = text.substr(slash + 1, close - slash - 1);
    if (!all_digits(n)) throw std::invalid_argument(fmt::format("expected a shard count in '{}'", shown(text)));
    long long count = bounded_number(n, kMaxCount);
    if (count < 0)
      throw std::invalid_argument(fmt::format("shard count {} is too large (at most {}) in '{}'", shown(n), kMaxCount, shown(text)));
    t.num_shards = static_cast<int>(count);
    if (t.num_shards < 1 || t.shards.empty() || t.shards.runs().back().second > t.num_shards)
      throw std::invalid_argument(fmt::format("shards {} are out of range for {} shards in '{}'", shown(t.shards.str()), t.num_shards, shown(text)));
    i = close + 1;
  }
  if (i < text.size() && text[i] == '@') {
    std::string_view n = text.substr(i + 1);
    long long step = all_digits(n) ? bounded_number(n, kMaxNumber) : -1;
    if (step < 0) throw std::invalid_argument(fmt::format("expected a step (0 to {}) after '@' in '{}'", kMaxNumber, shown(text)));
    t.step = static_cast<int>(step);
    i = text.size();
  }
  if (i != text.size())
    throw std::invalid_argument(fmt::format("unexpected '{}' at the end of '{}'", shown(text.substr(i)), shown(text)));
  return t;
}

Schedule parse_schedule(const std::string& text, const std::string& source) { return Parser(text, source).parse(); }

Schedule read_schedule_file(const std::string& path) {
  std::string text;
  try {
    text = read_input_file(path);
  } catch (const std::invalid_argument& e) {
    throw ParseError(e.what());
  }
  return parse_schedule(text, path);
}

std::string print_op(const Op& op, const ScheduleHeader& h) {
  std::string s = op_name(op.kind);
  if (op.layer >= 0 && op.kind != OpKind::Loss && op.kind != OpKind::Send && op.kind != OpKind::Recv &&
      op.kind != OpKind::Load && op.kind != OpKind::Free && op.kind != OpKind::Accumulate)
    s += fmt::format(" L{}", op.layer);
  bool show_batches = is_compute(op.kind) && op.kind != OpKind::Update;
  if (show_batches) s += fmt::format(" {{{}}}", op.batches.str());
  if (op.kind == OpKind::Send) s += fmt::format(" to {}", op.peer);
  if (op.kind == OpKind::Recv) s += op.peer < 0 ? std::string(" from any") : fmt::format(" from {}", op.peer);
  if (is_collective(op.kind) && op.group != 0) s += fmt::format(" group {}", op.group);
  if (is_rooted(op.kind)) s += fmt::format(" root {}", op.peer);
  if (op.stream != 0) s += fmt::format(" stream {}", op.stream);
  auto dr = default_reads(op, h.layers, h.microbatches);
  auto dw = default_writes(op, h.layers, h.microbatches);
  if (!op.reads.empty() && (!dr || *dr != op.reads)) s += " :" + tensors(op.reads);
  if (!op.writes.empty() && (!dw || *dw != op.writes)) s += " ->" + tensors(op.writes);
  return s;
}

std::string print_schedule(const Schedule& sched) {
  const ScheduleHeader& h = sched.header;
  std::string s = fmt::format("trainsim-schedule {}\nworld_size {}\nlayers {}\nmicrobatches {}\ncost_model {}\n",
                              h.version, h.world_size, h.layers, h.microbatches, h.cost_model);
  if (h.cost_model == "hardware" && h.hardware) s += print_hardware_block(*h.hardware);
  s += fmt::format("p2p {}\n", h.p2p == P2PMode::OneSlotPerDestination ? "one-slot" : "per-pair");
  if (!h.stage_map.empty()) {
    s += "stage_map";
    for (int r : h.stage_map) s += fmt::format(" {}", r);
    s += "\n";
  }
  if (h.layout) s += "layout " + h.layout->str() + "\n";
  if (!h.expert_load.empty()) {
    s += "expert_load";
    for (double v : h.expert_load) s += fmt::format(" {}", v);
    s += "\n";
  }
  for (std::size_t g = 0; g < h.groups.size(); ++g) {
    s += fmt::format("group {}", g + 1);
    if (g < h.group_names.size() && !h.group_names[g].empty()) s += " " + h.group_names[g];
    for (int r : h.groups[g]) s += fmt::format(" {}", r);
    s += "\n";
  }
  for (std::size_t r = 0; r < sched.ranks.size(); ++r) {
    s += fmt::format("\nrank {}\n", r);
    for (const Op& op : sched.ranks[r]) s += "  " + print_op(op, h) + "\n";
  }
  return s;
}

}  // namespace trainsim
