#include "exec/dist/rendezvous.h"

#include <algorithm>
#include <limits>
#include <unistd.h>

#include <fmt/format.h>

#include "exec/deadline.h"
#include "exec/dist/handshake.h"
#include "exec/dist/rendezvous_internal.h"

namespace trainsim::exec::dist {

std::string endpoint_name(const tcp::socket& s) {
  boost::system::error_code ec;
  auto ep = s.remote_endpoint(ec);
  return ec ? std::string("an unknown peer") : fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string("?");
}

tcp::endpoint resolve(asio::io_context& io, const RankEnv& env) {
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto results = resolver.resolve(env.master_addr, std::to_string(env.master_port), ec);
  if (ec || results.empty())
    throw RendezvousError(fmt::format("cannot resolve MASTER_ADDR '{}': {}", peer_text(env.master_addr),
                                      ec ? ec.message() : "no address"));
  return results.begin()->endpoint();
}

void run_until(asio::io_context& io, const bool& done) {
  io.restart();
  while (!done && io.run_one() > 0) {
  }
}

void flush(asio::io_context& io, const std::vector<std::shared_ptr<Link>>& links) {
  auto until = Clock::now() + std::chrono::seconds(1);
  io.restart();
  io.poll();  // the sends posted so far join their links' queues
  while (Clock::now() < until &&
         std::any_of(links.begin(), links.end(), [](const auto& l) { return l && !l->ended() && !l->idle(); }))
    io.run_one_for(std::chrono::milliseconds(20));
}

std::string peer_text(const std::string& text, std::size_t max) {
  std::string s;
  const std::size_t n = std::min(text.size(), max);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c > 0x7e) s += fmt::format("\\x{:02x}", c);
    else s += static_cast<char>(c);
  }
  if (text.size() > max) s += fmt::format("... ({} bytes in all)", text.size());
  return s;
}

std::optional<int> json_int(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned()) {
    const auto v = it->get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) return std::nullopt;
    return static_cast<int>(v);
  }
  const auto v = it->get<std::int64_t>();
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(v);
}

std::optional<std::string> json_string(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

std::optional<nlohmann::json> json_object(const std::vector<unsigned char>& text) {
  // no exceptions: a parse error's message would quote the peer's bytes
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

std::string json_diff(const std::string& theirs, const std::string& ours) {
  auto a = nlohmann::json::parse(theirs, nullptr, false), b = nlohmann::json::parse(ours, nullptr, false);
  auto whole = [&] { return peer_text(theirs) + " against " + peer_text(ours); };
  if (a.is_discarded() || b.is_discarded() || !a.is_object() || !b.is_object()) return whole();
  // dump() with replacement: a peer's invalid UTF-8 must not throw
  auto dump = [](const nlohmann::json& v) { return peer_text(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), 80); };
  std::string out;
  int shown = 0, more = 0;
  auto add = [&](const std::string& k, const std::string& x, const std::string& y) {
    if (shown == 8) return void(++more);
    ++shown;
    out += fmt::format("{}{} {} against {}", out.empty() ? "" : ", ", peer_text(k, 40), x, y);
  };
  for (auto& [k, v] : b.items()) {
    std::string x = a.contains(k) ? dump(a[k]) : "nothing";
    if (x != dump(v)) add(k, x, dump(v));
  }
  for (auto& [k, v] : a.items())
    if (!b.contains(k)) add(k, dump(v), "nothing");
  if (more) out += fmt::format(" and {} more", more);
  return out.empty() ? whole() : out;
}

std::string token_problem(const std::string& token, bool insecure) {
  const char* how = "set the same secret for every rank before starting them, e.g. `export TRAINSIM_TOKEN=$(openssl "
                    "rand -hex 16)` before srun or torchrun on every node (`trainsim launch` sets one itself)";
  if (token.empty())
    return insecure ? std::string()
                    : fmt::format("TRAINSIM_TOKEN is not set: a job of several processes needs a shared secret, or "
                                  "any process that reaches rank 0's port can join it; {} (or pass --insecure to accept "
                                  "any process)",
                                  how);
  if (token.size() < kMinTokenBytes)
    return fmt::format("TRAINSIM_TOKEN has {} characters, fewer than {}: a short token can be guessed offline by "
                       "anyone who reaches the port; {}",
                       token.size(), kMinTokenBytes, how);
  return "";
}

std::unique_ptr<ProcessGroup> rendezvous(const RankEnv& env, const JobIdentity& identity, const RendezvousOptions& options) {
  if (env.world_size < 2) throw RendezvousError("a rendezvous needs at least 2 ranks");
  if (std::string why = token_problem(options.token, options.insecure); !why.empty()) throw RendezvousError(why);
  try {
    require_sodium();
  } catch (const std::exception& e) {
    throw RendezvousError(e.what());
  }
  return env.rank == 0 ? serve(env, identity, options) : join(env, identity, options);
}

}  // namespace trainsim::exec::dist
