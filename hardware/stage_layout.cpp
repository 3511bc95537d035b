#include "hardware/stage_layout.h"

#include <cctype>

#include <fmt/format.h>

namespace trainsim::hw {

namespace {

// A character as an error quotes it: printable ASCII as itself, anything else as \xNN.
std::string shown_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string(1, c);
  return fmt::format("\\x{:02X}", u);
}

// The blocks of the stages a piece of layout writes, a separator between each two: "t*2|t" is {2, 1}, "|" is
// {0, 0}, "t" is {1}. Two pieces written one after the other join at the stage they share.
using Parts = std::vector<long long>;

// Recursive descent over the text between the leading E and the trailing L (docs in stage_layout.h).
class LayoutParser {
 public:
  LayoutParser(std::string_view text, std::size_t begin, std::size_t end) : text_(text), i_(begin), end_(end) {}

  Parts parse() {
    Parts p = sequence(0, 0);
    return p;
  }

 private:
  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    throw LayoutError(fmt::format("position {}: {}", at + 1, what), static_cast<int>(at + 1));
  }

  // Appends `b` (of `b_blocks` blocks) to `a` (of `a_blocks`): b's first stage continues a's last. Checked against
  // the limits first, so the work is linear in what is kept (issue 38: no quadratic re-summing).
  void join(Parts& a, long long a_blocks, const Parts& b, long long b_blocks, std::size_t at) const {
    check_size(static_cast<long long>(a.size()) + static_cast<long long>(b.size()) - 1, a_blocks + b_blocks, at);
    a.back() += b.front();
    a.insert(a.end(), b.begin() + 1, b.end());
  }

  static long long sum(const Parts& p) {
    long long s = 0;
    for (long long v : p) s += v;
    return s;
  }

  void check_size(long long stages, long long blocks, std::size_t at) const {
    if (stages > kMaxLayoutCount)
      fail(at, fmt::format("the layout unrolls to more than {} stages", kMaxLayoutCount));
    if (blocks > kMaxLayoutCount)
      fail(at, fmt::format("the layout unrolls to more than {} blocks", kMaxLayoutCount));
  }

  // `p` written n times: checked once against the limits, then built in time linear in its size (one stage
  // written n times is one stage: no loop over n).
  Parts repeat(const Parts& p, long long n, std::size_t at) const {
    if (n == 0) return Parts{0};
    check_size(n * (static_cast<long long>(p.size()) - 1) + 1, n * sum(p), at);
    if (p.size() == 1) return Parts{p.front() * n};
    Parts out = p;
    out.reserve(static_cast<std::size_t>(n) * (p.size() - 1) + 1);
    for (long long k = 1; k < n; ++k) {
      out.back() += p.front();
      out.insert(out.end(), p.begin() + 1, p.end());
    }
    return out;
  }

  // Items up to the end of the text (depth 0) or the ')' that closes the group opened at `open` (depth > 0).
  Parts sequence(int depth, std::size_t open) {
    if (depth > kMaxDepth)
      fail(open, fmt::format("groups are nested deeper than {} levels", kMaxDepth));  // no unbounded recursion
    Parts out{0};
    long long out_blocks = 0;
    while (true) {
      if (i_ >= end_) {
        if (depth > 0) fail(open, "this '(' is not closed (a group is written '(...)*N')");
        return out;
      }
      const char c = text_[i_];
      const std::size_t at = i_;
      Parts item;
      if (c == ',') {  // cosmetic, as in Megatron-LM
        ++i_;
        continue;
      } else if (c == 't') {
        item = {1};
        ++i_;
      } else if (c == '|') {
        item = {0, 0};
        ++i_;
      } else if (c == '(') {
        ++i_;
        item = sequence(depth + 1, at);
        ++i_;  // the ')'
        if (i_ >= end_ || text_[i_] != '*')
          fail(at, "a group '(...)' must be repeated: write '(...)*N' (Megatron-LM's notation)");
      } else if (c == ')') {
        if (depth == 0) fail(at, "a ')' without its '('");
        return out;
      } else if (c == 'E') {
        fail(at, "'E' (the embedding) is written once, as the layout's first symbol");
      } else if (c == 'L') {
        fail(at, "'L' (the final norm, LM head and loss) is written once, as the layout's last symbol");
      } else if (c == 'm') {
        fail(at, "'m' (a multi-token-prediction layer, Megatron-LM) is not supported: trainsim's models have none");
      } else if (c == '*') {
        fail(at, "a '*' repeats the symbol or group just before it, and there is none here");
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        fail(at, "a space: write the layout as one word (commas may separate its parts)");
      } else {
        fail(at, fmt::format("unknown symbol '{}' (the layout is written with E, t, L, |, (...)*N, X*N and commas)",
                             shown_char(c)));
      }
      if (i_ < end_ && text_[i_] == '*') item = repeat(item, count(), at);
      const long long item_blocks = sum(item);
      join(out, out_blocks, item, item_blocks, at);
      out_blocks += item_blocks;
    }
  }

  // The N of "*N" at i_ (which is the '*').
  long long count() {
    const std::size_t star = i_++;
    std::size_t j = i_;
    while (j < end_ && std::isdigit(static_cast<unsigned char>(text_[j]))) ++j;
    if (j == i_) fail(star, "expected a repeat count after '*' (a whole number, e.g. t*4)");
    if (j - i_ > 7) fail(i_, fmt::format("the repeat count is too large (at most {})", kMaxLayoutCount));
    long long n = 0;
    for (std::size_t k = i_; k < j; ++k) n = n * 10 + (text_[k] - '0');
    if (n > kMaxLayoutCount) fail(i_, fmt::format("the repeat count {} is too large (at most {})", n, kMaxLayoutCount));
    i_ = j;
    return n;
  }

  static constexpr int kMaxDepth = 64;  // nested groups: far beyond any layout written by hand
  std::string_view text_;
  std::size_t i_, end_;
};

}  // namespace

StageLayout::StageLayout(std::vector<int> blocks_per_layer) : blocks_(std::move(blocks_per_layer)) {
  if (blocks_.empty()) throw LayoutError("a layout needs at least one stage", 0);
  if (static_cast<long long>(blocks_.size()) > kMaxLayoutCount)
    throw LayoutError(fmt::format("a layout has at most {} stages, got {}", kMaxLayoutCount, blocks_.size()), 0);
  long long total = 0;
  for (int b : blocks_) {
    if (b < 0) throw LayoutError(fmt::format("a stage cannot hold {} blocks", b), 0);
    total += b;
  }
  if (total > kMaxLayoutCount)
    throw LayoutError(fmt::format("a layout has at most {} blocks, got {}", kMaxLayoutCount, total), 0);
  total_ = static_cast<int>(total);
}

StageLayout StageLayout::parse(std::string_view text) {
  if (text.empty()) throw LayoutError("an empty layout (write the stages between E and L, e.g. Et*4|t*4L)", 0);
  // Commas are cosmetic anywhere; E must be the first symbol and L the last.
  std::size_t first = 0, last = text.size();
  while (first < text.size() && text[first] == ',') ++first;
  while (last > first && text[last - 1] == ',') --last;
  if (first == last) throw LayoutError("position 1: a layout of commas only (e.g. Et*4|t*4L)", 1);
  if (text[first] != 'E')
    throw LayoutError(fmt::format("position {}: a layout starts with E (the embedding), not '{}' (e.g. Et*4|t*4L)",
                                  first + 1, shown_char(text[first])),
                      static_cast<int>(first + 1));
  if (first + 1 < text.size() && text[first + 1] == '*')
    throw LayoutError(fmt::format("position {}: 'E' (the embedding) is written once, without a repeat", first + 2),
                      static_cast<int>(first + 2));
  if (last == first + 1 || text[last - 1] != 'L') {
    const std::size_t at = last - 1;
    throw LayoutError(fmt::format("position {}: a layout ends with L (the final norm, LM head and loss), not '{}' "
                                  "(e.g. Et*4|t*4L)",
                                  at + 1, last == first + 1 ? std::string("E") : shown_char(text[at])),
                      static_cast<int>(at + 1));
  }
  Parts parts = LayoutParser(text, first + 1, last - 1).parse();
  std::vector<int> blocks(parts.begin(), parts.end());
  return StageLayout(std::move(blocks));
}

std::vector<int> weighted_split(int blocks, int layers, int first_weight, int last_weight, std::string* why) {
  auto refuse = [&](std::string text) {
    if (why) *why = std::move(text);
    return std::vector<int>{};
  };
  if (layers < 1) return refuse(fmt::format("a split needs at least one stage, got {}", layers));
  if (layers == 1) return {blocks};
  const long long effective = static_cast<long long>(blocks) + first_weight + last_weight;
  if (layers > effective)
    return refuse(fmt::format("{} stages are more than the {} effective layers", layers, effective));
  const int per = static_cast<int>(effective / layers), extra = static_cast<int>(effective % layers);
  if (first_weight > per || last_weight > per)
    return refuse(fmt::format("the first and last stages' weights ({} and {}) exceed the {} layers per stage",
                              first_weight, last_weight, per));
  std::vector<int> out;
  out.reserve(layers);
  int used = 0;
  for (int s = 0; s < layers; ++s) {
    int n = per + (s < extra ? 1 : 0);
    if (s == 0) n -= first_weight;
    else if (s == layers - 1) n -= last_weight;
    n = std::max(0, std::min(n, blocks - used));
    out.push_back(n);
    used += n;
  }
  if (used != blocks)
    return refuse(fmt::format("the split places {} of the {} blocks over {} stages", used, blocks, layers));
  return out;
}

StageLayout StageLayout::even(int blocks, int layers) {
  if (layers < 1) throw LayoutError(fmt::format("a layout needs at least one stage, got {}", layers), 0);
  std::vector<int> out;
  out.reserve(layers);
  for (int i = 0; i < layers; ++i)
    out.push_back(static_cast<int>(static_cast<long long>(i + 1) * blocks / layers -
                                   static_cast<long long>(i) * blocks / layers));
  return StageLayout(std::move(out));
}

std::string StageLayout::str() const {
  auto stage = [&](std::size_t i) {
    return blocks_[i] == 0 ? std::string() : blocks_[i] == 1 ? std::string("t") : fmt::format("t*{}", blocks_[i]);
  };
  // Every stage but the last is followed by '|'; a run of three or more equal non-empty ones among them is
  // written as Megatron-LM's group, "(t*2|)*62", so a deep pipeline's layout stays one short line.
  std::string s = "E";
  const std::size_t last = blocks_.size() - 1;
  for (std::size_t i = 0; i < last;) {
    std::size_t j = i;
    while (j < last && blocks_[j] == blocks_[i]) ++j;
    if (j - i >= 3 && blocks_[i] > 0) {
      s += fmt::format("({}|)*{}", stage(i), j - i);
    } else {
      for (std::size_t k = i; k < j; ++k) s += stage(k) + "|";
    }
    i = j;
  }
  return s + stage(last) + "L";
}

std::vector<LayerContent> StageLayout::contents() const {
  std::vector<LayerContent> out;
  out.reserve(blocks_.size());
  int first = 0;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    out.push_back({first, blocks_[i], i == 0, i + 1 == blocks_.size()});
    first += blocks_[i];
  }
  return out;
}

}  // namespace trainsim::hw
