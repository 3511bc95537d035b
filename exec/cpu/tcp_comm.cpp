#include "exec/cpu/tcp_comm.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "exec/deadline.h"

namespace trainsim::exec {

namespace {

enum : std::uint8_t { kP2P = Frame::kFirstUserKind, kCollIn, kCollOut };

// out = Σ_j inputs[j][offset, offset + count) in member order, as ThreadHub's sum_into.
template <typename T>
std::vector<unsigned char> sum(const std::vector<std::optional<std::vector<unsigned char>>>& inputs, std::size_t offset,
                               std::size_t count) {
  std::vector<T> out(count), x(count);
  std::memcpy(out.data(), inputs[0]->data() + offset * sizeof(T), count * sizeof(T));
  for (std::size_t j = 1; j < inputs.size(); ++j) {
    std::memcpy(x.data(), inputs[j]->data() + offset * sizeof(T), count * sizeof(T));
    for (std::size_t e = 0; e < count; ++e) out[e] += x[e];
  }
  std::vector<unsigned char> bytes(count * sizeof(T));
  std::memcpy(bytes.data(), out.data(), bytes.size());
  return bytes;
}

// The root of a broadcast's or reduce's tag ("broadcast 3", "reduce 0": the kind, then the root's global
// rank), -1 for another collective, -2 for a rooted tag whose root is not a number up to `world`.
int tag_root(const std::string& tag, int world) {
  std::string_view rest;
  if (tag.rfind("broadcast ", 0) == 0) rest = std::string_view(tag).substr(10);
  else if (tag.rfind("reduce ", 0) == 0) rest = std::string_view(tag).substr(7);
  else return -1;
  if (rest.empty() || rest.size() > 9 || !std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -2;
  const int r = std::stoi(std::string(rest));
  return r < world ? r : -2;
}

}  // namespace

TcpHub::TcpHub(ProcessGroup& processes, std::vector<std::vector<int>> groups, double timeout_seconds)
    : pg_(processes), groups_(std::move(groups)), timeout_(timeout_seconds) {
  if (groups_.empty()) throw std::invalid_argument("the communicator needs group 0 (every rank)");
  for (const auto& g : groups_) {
    if (g.empty()) throw std::invalid_argument("a communicator group is empty");
    for (int r : g)
      if (r < 0 || r >= pg_.world_size()) throw std::invalid_argument(fmt::format("group member {} is not a rank", r));
  }
  pg_.set_frame_handler([this](Frame&& f) { on_frame(std::move(f)); });
}

TcpHub::~TcpHub() { pg_.set_frame_handler(nullptr); }

void TcpHub::abort(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = why;
  }
  cv_.notify_all();
}

void TcpHub::on_frame(Frame&& f) {
  std::string error;
  {
    std::lock_guard lock(mu_);
    switch (f.kind) {
      case kP2P:
        inbox_[f.src].push_back(std::move(f));
        break;
      case kCollOut:
        results_[{f.group, f.seq}] = std::move(f);
        break;
      case kCollIn:
        error = coordinate(std::move(f));
        break;
      default:
        error = fmt::format("rank {}: a communicator frame of unknown kind {}", pg_.rank(), int{f.kind});
    }
  }
  cv_.notify_all();
  if (!error.empty()) pg_.fail(error);
}

std::string TcpHub::coordinate(Frame&& f) {
  if (pg_.rank() != 0) return fmt::format("rank {} got a collective's input, which only rank 0 collects", pg_.rank());
  std::uint64_t element = 0;  // bytes per element of the input (0: a barrier carries none)
  const int root = tag_root(f.tag, pg_.world_size());
  if (f.tag == "all-gather" || f.tag == "all-reduce" || f.tag == "reduce-scatter" || root >= 0) element = sizeof(float);
  else if (f.tag == "all-reduce-f64") element = sizeof(double);
  else if (f.tag != "barrier" && f.tag != "all-to-all")
    return fmt::format("rank {} called an unknown collective over group {}", f.src, f.group);
  if (f.group < 0 || f.group >= static_cast<int>(groups_.size()))
    return fmt::format("rank {} called a collective over unknown group {}", f.src, f.group);
  const std::vector<int>& members = groups_[f.group];
  auto it = std::find(members.begin(), members.end(), f.src);
  if (it == members.end()) return fmt::format("rank {} called a {} over group {}, which it is not in", f.src, f.tag, f.group);
  const std::size_t me = static_cast<std::size_t>(it - members.begin());
  if (root >= 0 && std::find(members.begin(), members.end(), root) == members.end())
    return fmt::format("rank {} called a {} over group {}, whose members do not include the root", f.src, f.tag, f.group);
  if (f.tag == "all-to-all") {  // count = the group's size; data = its send counts (uint64, floats), then the floats
    if (f.count != members.size() || f.data.size() < 8 * f.count)
      return fmt::format("rank {} called an all-to-all over group {} of {} members with {} blocks", f.src, f.group,
                         members.size(), f.count);
    std::uint64_t floats = 0;
    for (std::size_t j = 0; j < f.count; ++j) {
      std::uint64_t c;
      std::memcpy(&c, f.data.data() + 8 * j, 8);
      if (c > f.data.size() / sizeof(float)) return fmt::format("rank {} sent an all-to-all block of {} floats: too many", f.src, c);
      floats += c;
    }
    if (f.data.size() != 8 * f.count + floats * sizeof(float))
      return fmt::format("rank {} sent {} bytes for an all-to-all of {} floats over group {}, expected {}", f.src,
                         f.data.size(), floats, f.group, 8 * f.count + floats * sizeof(float));
  }
  // Rank 0 reads exactly what the call's kind and count say of every input: check it is all there (a
  // broadcast's input comes from its root only).
  const std::uint64_t parts = f.tag == "reduce-scatter" ? members.size()
                              : f.tag.rfind("broadcast ", 0) == 0 && f.src != root ? 0
                                                                                    : 1;
  if (element && parts && f.count > std::numeric_limits<std::uint64_t>::max() / element / parts)  // (no overflow below)
    return fmt::format("rank {} called a {} of {} elements over group {}: too many", f.src, f.tag, f.count, f.group);
  if (f.tag != "all-to-all" && f.data.size() != f.count * element * parts)
    return fmt::format("rank {} sent {} bytes for a {} of {} elements over group {}, expected {}", f.src, f.data.size(),
                       f.tag, f.count, f.group, f.count * element * parts);
  const std::pair<int, std::uint64_t> key{f.group, f.seq};
  auto [pos, fresh] = pending_.try_emplace(key);
  Pending& p = pos->second;
  if (fresh) {
    p.what = f.tag, p.count = f.count;
    p.inputs.resize(members.size());
  }
  if (p.what != f.tag || p.count != f.count)
    return fmt::format("call {} over group {} is a {} of {} on rank {} but a {} of {} on another member", f.seq, f.group,
                       f.tag, f.count, f.src, p.what, p.count);
  if (p.inputs[me]) return fmt::format("rank {} entered call {} over group {} twice", f.src, f.seq, f.group);
  p.inputs[me] = std::move(f.data);
  if (++p.arrived == static_cast<int>(members.size())) {
    finish(key.first, key.second, p);
    pending_.erase(key);
  }
  return "";
}

void TcpHub::finish(int group, std::uint64_t seq, Pending& p) {
  const std::vector<int>& members = groups_[group];
  const std::size_t n = members.size(), count = p.count;
  std::vector<unsigned char> common;
  const int root = tag_root(p.what, pg_.world_size());
  const std::size_t root_index =
      root >= 0 ? static_cast<std::size_t>(std::find(members.begin(), members.end(), root) - members.begin()) : 0;
  if (p.what.rfind("broadcast ", 0) == 0) {
    common = *p.inputs[root_index];
  } else if (root >= 0) {  // reduce: the sum to the root only
    common = sum<float>(p.inputs, 0, count);
  } else if (p.what == "all-gather") {
    for (auto& in : p.inputs) common.insert(common.end(), in->begin(), in->end());
  } else if (p.what == "all-reduce") {
    common = sum<float>(p.inputs, 0, count);
  } else if (p.what == "all-reduce-f64") {
    common = sum<double>(p.inputs, 0, count);
  }
  for (std::size_t i = 0; i < n; ++i) {
    Frame out;
    out.kind = kCollOut, out.src = 0, out.dst = members[i], out.group = group, out.seq = seq, out.tag = p.what;
    if (p.what == "all-to-all") {  // member i's blocks from every member j: their counts, then the floats
      out.data.resize(8 * n);
      for (std::size_t j = 0; j < n; ++j) {
        const std::vector<unsigned char>& in = *p.inputs[j];
        std::uint64_t offset = 0, c = 0;
        for (std::size_t q = 0; q <= i; ++q) {
          std::memcpy(&c, in.data() + 8 * q, 8);
          if (q < i) offset += c;
        }
        std::memcpy(out.data.data() + 8 * j, &c, 8);
        const unsigned char* from = in.data() + 8 * n + offset * sizeof(float);
        out.data.insert(out.data.end(), from, from + c * sizeof(float));
      }
      pg_.post(std::move(out));
      continue;
    }
    out.data = p.what == "reduce-scatter" ? sum<float>(p.inputs, i * count, count) : common;
    if (root >= 0 && p.what.rfind("reduce ", 0) == 0 && i != root_index) out.data.clear();
    pg_.post(std::move(out));
  }
}

class TcpCommunicator final : public Communicator {
 public:
  TcpCommunicator(TcpHub& hub, int rank) : hub_(hub), rank_(rank), next_seq_(hub.groups_.size(), 0) {}

  int rank() const override { return rank_; }
  int world_size() const override { return hub_.pg_.world_size(); }

  void send(StreamContext&, const void* data, std::size_t bytes, int peer, const std::string& tag) override {
    check_peer(peer, "send to");
    Frame f;
    f.kind = kP2P, f.dst = peer, f.tag = tag;
    f.data.assign(static_cast<const unsigned char*>(data), static_cast<const unsigned char*>(data) + bytes);
    {
      std::lock_guard lock(hub_.mu_);
      if (hub_.aborted_) throw CommError(hub_.abort_reason_);
    }
    hub_.pg_.post(std::move(f));
  }

  void recv(StreamContext&, void* data, std::size_t bytes, int peer, const std::string& tag) override {
    check_peer(peer, "recv from");
    std::unique_lock lock(hub_.mu_);
    auto& q = hub_.inbox_[peer];
    wait(lock, [&] { return !q.empty(); }, [&] { return fmt::format("recv of {} from rank {}", tag, peer); });
    Frame m = std::move(q.front());
    q.pop_front();
    lock.unlock();
    check_received(rank_, peer, tag, bytes, m.tag, m.data.size());
    std::memcpy(data, m.data.data(), bytes);
  }

  void all_gather(StreamContext&, const float* in, float* out, std::size_t count, int group) override {
    auto r = collective(group, "all-gather", count, in, count * sizeof(float));
    expect(r, group_size(group) * count * sizeof(float));
    std::memcpy(out, r.data(), r.size());
  }

  void reduce_scatter(StreamContext&, const float* in, float* out, std::size_t count, int group) override {
    auto r = collective(group, "reduce-scatter", count, in, group_size(group) * count * sizeof(float));
    expect(r, count * sizeof(float));
    std::memcpy(out, r.data(), r.size());
  }

  void all_reduce(StreamContext&, const float* in, float* out, std::size_t count, int group) override {
    auto r = collective(group, "all-reduce", count, in, count * sizeof(float));
    expect(r, count * sizeof(float));
    std::memcpy(out, r.data(), r.size());
  }

  void all_reduce(StreamContext&, const double* in, double* out, std::size_t count, int group) override {
    auto r = collective(group, "all-reduce-f64", count, in, count * sizeof(double));
    expect(r, count * sizeof(double));
    std::memcpy(out, r.data(), r.size());
  }

  void barrier(StreamContext&, int group) override { collective(group, "barrier", 0, nullptr, 0); }

  void broadcast(StreamContext&, const float* in, float* out, std::size_t count, int root, int group) override {
    const bool is_root = check_root(group, root, "broadcast");
    const std::string tag = fmt::format("broadcast {}", root);
    auto r = collective(group, tag.c_str(), count, in, is_root ? count * sizeof(float) : 0);
    expect(r, count * sizeof(float));
    if (out != in && !r.empty()) std::memcpy(out, r.data(), r.size());
  }

  void all_to_all(StreamContext&, const float* in, const std::vector<std::size_t>& send_counts, float* out,
                  const std::vector<std::size_t>& recv_counts, int group) override {
    member_index(hub_.groups_, group, rank_, "all-to-all");
    const std::size_t k = group_size(group);
    check_all_to_all_counts(rank_, group, k, send_counts.size(), recv_counts.size());
    std::size_t floats = 0, expected = 0;
    for (std::size_t c : send_counts) floats += c;
    for (std::size_t c : recv_counts) expected += c;
    std::vector<unsigned char> payload(8 * k + floats * sizeof(float));
    for (std::size_t j = 0; j < k; ++j) {
      const std::uint64_t c = send_counts[j];
      std::memcpy(payload.data() + 8 * j, &c, 8);
    }
    if (floats) std::memcpy(payload.data() + 8 * k, in, floats * sizeof(float));
    auto r = collective(group, "all-to-all", k, payload.data(), payload.size());
    expect(r, 8 * k + expected * sizeof(float));
    for (std::size_t j = 0; j < k; ++j) {
      std::uint64_t c;
      std::memcpy(&c, r.data() + 8 * j, 8);
      if (c != recv_counts[j]) throw all_to_all_mismatch(rank_, group, recv_counts[j], j, c);
    }
    if (expected) std::memcpy(out, r.data() + 8 * k, expected * sizeof(float));
  }

  void reduce(StreamContext&, const float* in, float* out, std::size_t count, int root, int group) override {
    const bool is_root = check_root(group, root, "reduce");
    const std::string tag = fmt::format("reduce {}", root);
    auto r = collective(group, tag.c_str(), count, in, count * sizeof(float));
    expect(r, is_root ? count * sizeof(float) : 0);
    if (is_root && !r.empty()) std::memcpy(out, r.data(), r.size());
  }

 private:
  std::size_t group_size(int group) const { return hub_.groups_[group].size(); }

  void expect(const std::vector<unsigned char>& r, std::size_t bytes) const {
    if (r.size() != bytes)
      throw CommError(fmt::format("rank {}: a collective's result has {} bytes, expected {}", rank_, r.size(), bytes));
  }

  // True when this rank is `root`; CommError when the root is not a member of `group` (or this rank is not).
  bool check_root(int group, int root, const char* what) const {
    member_index(hub_.groups_, group, rank_, what);
    const auto& m = hub_.groups_[group];
    if (std::find(m.begin(), m.end(), root) == m.end())
      throw CommError(fmt::format("rank {}: {} over group {} from root {}, which is not in it", rank_, what, group, root));
    return root == rank_;
  }

  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= world_size() || peer == rank_)
      throw CommError(fmt::format("rank {}: {} rank {}: no such peer", rank_, what, peer));
  }

  template <typename Pred, typename Describe>
  void wait(std::unique_lock<std::mutex>& lock, Pred done, Describe describe) {
    const auto deadline = deadline_after(hub_.timeout_.count());  // (saturates: --timeout 1e300 waits, not fails)
    while (!hub_.aborted_ && !done()) {
      if (hub_.cv_.wait_until(lock, deadline) == std::cv_status::timeout && !hub_.aborted_ && !done())
        throw CommError(fmt::format("rank {}: timed out after {:g} s waiting for the {}", rank_, hub_.timeout_.count(),
                                    describe()));
    }
    if (hub_.aborted_ && !done()) throw CommError(hub_.abort_reason_);
  }

  std::vector<unsigned char> collective(int group, const char* what, std::size_t count, const void* in, std::size_t bytes) {
    member_index(hub_.groups_, group, rank_, what);  // throws for an unknown group or a non-member
    const std::uint64_t seq = next_seq_[group]++;
    Frame f;
    f.kind = kCollIn, f.dst = 0, f.group = group, f.seq = seq, f.count = count, f.tag = what;
    if (bytes) f.data.assign(static_cast<const unsigned char*>(in), static_cast<const unsigned char*>(in) + bytes);
    {
      std::lock_guard lock(hub_.mu_);
      if (hub_.aborted_) throw CommError(hub_.abort_reason_);
    }
    hub_.pg_.post(std::move(f));
    std::unique_lock lock(hub_.mu_);
    const std::pair<int, std::uint64_t> key{group, seq};
    wait(lock, [&] { return hub_.results_.count(key) > 0; },
         [&] { return fmt::format("{} over group {} (call {}; rank 0 collects the members' parts)", what, group, seq); });
    std::vector<unsigned char> out = std::move(hub_.results_[key].data);
    hub_.results_.erase(key);
    return out;
  }

  TcpHub& hub_;
  int rank_;
  std::vector<std::uint64_t> next_seq_;
};

std::unique_ptr<Communicator> TcpHub::communicator(int rank) {
  if (rank != pg_.rank())
    throw std::invalid_argument(fmt::format("this process holds rank {}, not rank {}", pg_.rank(), rank));
  return std::make_unique<TcpCommunicator>(*this, rank);
}

}  // namespace trainsim::exec
