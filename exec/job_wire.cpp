#include "exec/job_wire.h"

#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "schedules/text_format.h"

namespace trainsim::exec {

namespace {

struct Writer {
  std::string out;
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_bytes(const void* p, std::size_t n) {
    put<std::uint64_t>(n);
    out.append(static_cast<const char*>(p), n);
  }
};

struct Reader {
  const std::string& in;
  std::size_t pos = 0;
  void need(std::size_t n) const {
    if (in.size() - pos < n) throw std::runtime_error("a rank's report to rank 0 is truncated");
  }
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
  }
  std::string get_bytes() {
    auto n = get<std::uint64_t>();
    need(n);
    std::string s = in.substr(pos, n);
    pos += n;
    return s;
  }
};

}  // namespace

std::string encode_step(const StepOutput& out, std::size_t peak_bytes) {
  Writer w;
  w.put<std::uint64_t>(peak_bytes);
  w.put_bytes(out.loss_sums.data(), out.loss_sums.size() * sizeof(double));
  w.put<double>(out.grad_norm_sq);
  w.put<double>(out.aux_loss_sum);
  w.put<std::uint64_t>(out.peak_bytes);
  w.put<std::uint8_t>(out.state ? 1 : 0);
  if (out.state) {
    const std::string state = encode_state(*out.state);
    w.put_bytes(state.data(), state.size());
  }
  w.put<std::uint64_t>(out.timings.size());
  for (const WorkTiming& t : out.timings) w.put(t);
  w.put<std::uint64_t>(out.routing.size());
  for (const StepOutput::Route& r : out.routing) {
    w.put<std::int32_t>(r.block), w.put<std::int32_t>(r.microbatch), w.put<std::uint64_t>(r.hash);
    w.put<std::int32_t>(r.shard), w.put<std::int32_t>(r.shards);
    w.put_bytes(r.counts.data(), r.counts.size() * sizeof(int));
  }
  return std::move(w.out);
}

StepOutput decode_step(const std::string& bytes, std::size_t& peak_bytes) {
  Reader r{bytes};
  StepOutput out;
  peak_bytes = r.get<std::uint64_t>();
  std::string losses = r.get_bytes();
  if (losses.size() % sizeof(double) != 0) throw std::runtime_error("a rank's report to rank 0 is malformed (its losses)");
  out.loss_sums.resize(losses.size() / sizeof(double));
  std::memcpy(out.loss_sums.data(), losses.data(), out.loss_sums.size() * sizeof(double));
  out.grad_norm_sq = r.get<double>();
  out.aux_loss_sum = r.get<double>();
  out.peak_bytes = r.get<std::uint64_t>();
  const auto has_state = r.get<std::uint8_t>();
  if (has_state > 1) throw std::runtime_error("a rank's report to rank 0 is malformed (its state flag)");
  if (has_state) out.state = decode_state(r.get_bytes());
  auto n = r.get<std::uint64_t>();
  if (n > (bytes.size() - r.pos) / sizeof(WorkTiming)) throw std::runtime_error("a rank's report to rank 0 is truncated");
  for (std::uint64_t i = 0; i < n; ++i) out.timings.push_back(r.get<WorkTiming>());
  auto routes = r.get<std::uint64_t>();
  if (routes > (bytes.size() - r.pos) / 32)  // (each at least its block, microbatch, hash, shard and counts' length)
    throw std::runtime_error("a rank's report to rank 0 is truncated (its routing)");
  for (std::uint64_t i = 0; i < routes; ++i) {
    StepOutput::Route x;
    x.block = r.get<std::int32_t>(), x.microbatch = r.get<std::int32_t>(), x.hash = r.get<std::uint64_t>();
    x.shard = r.get<std::int32_t>(), x.shards = r.get<std::int32_t>();
    if (x.shards < 1 || x.shard < 0 || x.shard >= x.shards)
      throw std::runtime_error("a rank's report to rank 0 is malformed (its routing's sequence shard)");
    const std::string counts = r.get_bytes();
    if (counts.size() % sizeof(int) != 0) throw std::runtime_error("a rank's report to rank 0 is malformed (its routing)");
    x.counts.resize(counts.size() / sizeof(int));
    if (!counts.empty()) std::memcpy(x.counts.data(), counts.data(), counts.size());
    out.routing.push_back(std::move(x));
  }
  if (r.pos != bytes.size()) throw std::runtime_error("a rank's report to rank 0 is malformed (bytes after its end)");
  return out;
}

std::string encode_state(const HostState& state) {
  Writer w;
  w.put<std::uint64_t>(state.size());
  for (const auto& [t, v] : state) {
    std::string name = t.str();
    w.put_bytes(name.data(), name.size());
    w.put_bytes(v.data(), v.size() * sizeof(float));
  }
  return std::move(w.out);
}

HostState decode_state(const std::string& bytes) {
  Reader r{bytes};
  HostState state;
  auto n = r.get<std::uint64_t>();
  for (std::uint64_t i = 0; i < n; ++i) {
    Tensor t = parse_tensor(r.get_bytes());
    std::string data = r.get_bytes();
    if (data.size() % sizeof(float) != 0)
      throw std::runtime_error("a rank's state sent to rank 0 is malformed: " + t.str() + " is not whole fp32 values");
    std::vector<float> v(data.size() / sizeof(float));
    std::memcpy(v.data(), data.data(), v.size() * sizeof(float));
    if (!state.emplace(t, std::move(v)).second)
      throw std::runtime_error("a rank's state sent to rank 0 is malformed: it holds " + t.str() + " twice");
  }
  if (r.pos != bytes.size()) throw std::runtime_error("a rank's state sent to rank 0 is malformed (bytes after its end)");
  return state;
}

}  // namespace trainsim::exec
