#include "hardware/kernel_tables.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "hardware/fields.h"

namespace trainsim::hw {

namespace {

// Position of x on an ascending grid: the lower index and the weight of the upper one, in log2, clamped.
struct Where {
  std::size_t i = 0;
  double w = 0;
};
Where locate(const std::vector<double>& grid, double x) {
  if (grid.size() < 2 || x <= grid.front()) return {0, 0};
  if (x >= grid.back()) return {grid.size() - 1, 0};
  std::size_t hi = static_cast<std::size_t>(std::upper_bound(grid.begin(), grid.end(), x) - grid.begin());
  const std::size_t lo = hi - 1;
  return {lo, (std::log2(x) - std::log2(grid[lo])) / (std::log2(grid[hi]) - std::log2(grid[lo]))};
}

double number(const std::string& s, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0 || !std::isfinite(d))
    throw SpecError(fmt::format("expected a number for {}, got '{}'", what, s));
  return d;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, sep);) out.push_back(part);
  return out;
}

// The sorted distinct coordinates of one axis.
std::vector<double> axis(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

std::size_t index_of(const std::vector<double>& grid, double x) {
  return static_cast<std::size_t>(std::lower_bound(grid.begin(), grid.end(), x) - grid.begin());
}

void check_fraction(double v, const std::string& point) {
  if (!(v > 0 && v <= 1))
    throw SpecError(fmt::format("the value at {} must be in (0, 1] (a fraction of the peak), got {}", point, v));
}

}  // namespace

double GemmShapeTable::factor(double M, double N, double K) const {
  if (empty()) return 1;
  const Where a = locate(m, M), b = locate(n, N), c = locate(k, K);
  const std::size_t nn = n.size(), nk = k.size();
  double v = 0;
  for (int di = 0; di < 2; ++di)
    for (int dj = 0; dj < 2; ++dj)
      for (int dk = 0; dk < 2; ++dk) {
        const double w = (di ? a.w : 1 - a.w) * (dj ? b.w : 1 - b.w) * (dk ? c.w : 1 - c.w);
        if (w == 0) continue;
        v += w * value[((a.i + di) * nn + (b.i + dj)) * nk + (c.i + dk)];
      }
  return v / best;
}

namespace {

double attention_lookup(const AttentionTable& t, const std::vector<double>& values, double d, double s) {
  const Where a = locate(t.head_dim, d), b = locate(t.seq, s);
  const std::size_t ns = t.seq.size();
  double v = 0;
  for (int di = 0; di < 2; ++di)
    for (int dj = 0; dj < 2; ++dj) {
      const double w = (di ? a.w : 1 - a.w) * (dj ? b.w : 1 - b.w);
      if (w != 0) v += w * values[(a.i + di) * ns + (b.i + dj)];
    }
  return v / t.best;
}

}  // namespace

double AttentionTable::forward_factor(double d, double s) const { return empty() ? 1 : attention_lookup(*this, forward, d, s); }
double AttentionTable::backward_factor(double d, double s) const { return empty() ? 1 : attention_lookup(*this, backward, d, s); }

GemmShapeTable parse_gemm_table(const std::string& text) {
  GemmShapeTable t;
  if (text.empty() || text == "none") return t;
  std::map<std::tuple<double, double, double>, double> points;
  std::vector<double> ms, ns, ks;
  for (const std::string& entry : split(text, ',')) {
    const auto colon = entry.find(':');
    const auto dims = split(entry.substr(0, colon), 'x');
    if (colon == std::string::npos || dims.size() != 3)
      throw SpecError(fmt::format("expected MxNxK:VALUE entries separated by commas, got '{}'", entry));
    const double M = number(dims[0], "M"), N = number(dims[1], "N"), K = number(dims[2], "K");
    if (M < 1 || N < 1 || K < 1) throw SpecError(fmt::format("a GEMM's dimensions must be at least 1, got '{}'", entry));
    const double v = number(entry.substr(colon + 1), "the value");
    check_fraction(v, entry.substr(0, colon));
    if (!points.emplace(std::tuple{M, N, K}, v).second)
      throw SpecError(fmt::format("the shape {} is given twice", entry.substr(0, colon)));
    ms.push_back(M), ns.push_back(N), ks.push_back(K);
  }
  t.m = axis(ms), t.n = axis(ns), t.k = axis(ks);
  if (points.size() != t.m.size() * t.n.size() * t.k.size())
    throw SpecError(fmt::format("the shapes must fill a grid: {} M values x {} N x {} K need {} entries, got {}",
                                t.m.size(), t.n.size(), t.k.size(), t.m.size() * t.n.size() * t.k.size(),
                                points.size()));
  t.value.assign(points.size(), 0);
  for (const auto& [p, v] : points) {
    const auto [M, N, K] = p;
    t.value[(index_of(t.m, M) * t.n.size() + index_of(t.n, N)) * t.k.size() + index_of(t.k, K)] = v;
    t.best = std::max(t.best, v);
  }
  return t;
}

std::string gemm_table_text(const GemmShapeTable& t) {
  std::string out;
  for (std::size_t i = 0; i < t.m.size(); ++i)
    for (std::size_t j = 0; j < t.n.size(); ++j)
      for (std::size_t l = 0; l < t.k.size(); ++l)
        out += fmt::format("{}{}x{}x{}:{}", out.empty() ? "" : ",", t.m[i], t.n[j], t.k[l],
                           t.value[(i * t.n.size() + j) * t.k.size() + l]);
  return out;
}

AttentionTable parse_attention_table(const std::string& text) {
  AttentionTable t;
  if (text.empty() || text == "none") return t;
  std::map<std::pair<double, double>, std::pair<double, double>> points;
  std::vector<double> ds, ss;
  for (const std::string& entry : split(text, ',')) {
    const auto colon = entry.find(':');
    const auto dims = split(entry.substr(0, colon), 'x');
    const auto values = colon == std::string::npos ? std::vector<std::string>{} : split(entry.substr(colon + 1), '/');
    if (colon == std::string::npos || dims.size() != 2 || values.size() != 2)
      throw SpecError(fmt::format("expected DxS:FORWARD/BACKWARD entries separated by commas, got '{}'", entry));
    const double d = number(dims[0], "the head dimension"), s = number(dims[1], "the sequence length");
    if (d < 1 || s < 1) throw SpecError(fmt::format("a head dimension and a sequence length are at least 1, got '{}'", entry));
    const double f = number(values[0], "the forward value"), b = number(values[1], "the backward value");
    check_fraction(f, entry.substr(0, colon));
    check_fraction(b, entry.substr(0, colon));
    if (!points.emplace(std::pair{d, s}, std::pair{f, b}).second)
      throw SpecError(fmt::format("the point {} is given twice", entry.substr(0, colon)));
    ds.push_back(d), ss.push_back(s);
  }
  t.head_dim = axis(ds), t.seq = axis(ss);
  if (points.size() != t.head_dim.size() * t.seq.size())
    throw SpecError(fmt::format("the points must fill a grid: {} head dimensions x {} sequence lengths need {} "
                                "entries, got {}",
                                t.head_dim.size(), t.seq.size(), t.head_dim.size() * t.seq.size(), points.size()));
  t.forward.assign(points.size(), 0), t.backward.assign(points.size(), 0);
  for (const auto& [p, v] : points) {
    const std::size_t at = index_of(t.head_dim, p.first) * t.seq.size() + index_of(t.seq, p.second);
    t.forward[at] = v.first, t.backward[at] = v.second;
    t.best = std::max(t.best, v.first);
  }
  return t;
}

std::string attention_table_text(const AttentionTable& t) {
  std::string out;
  for (std::size_t i = 0; i < t.head_dim.size(); ++i)
    for (std::size_t j = 0; j < t.seq.size(); ++j) {
      const std::size_t at = i * t.seq.size() + j;
      out += fmt::format("{}{}x{}:{}/{}", out.empty() ? "" : ",", t.head_dim[i], t.seq[j], t.forward[at], t.backward[at]);
    }
  return out;
}

}  // namespace trainsim::hw
