#include "exec/dist/rendezvous.h"

#include <random>
#include <set>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "exec/dist/tcp_group.h"

namespace trainsim::exec::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kProtocol = 1;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string endpoint_name(const tcp::socket& s) {
  boost::system::error_code ec;
  auto ep = s.remote_endpoint(ec);
  return ec ? std::string("an unknown peer") : fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string("?");
}

JobId fresh_job_id() {
  JobId id{};
  std::random_device rd;  // /dev/urandom on Linux
  for (auto& b : id) b = static_cast<unsigned char>(rd());
  return id;
}

// Runs `io` until `done` or `deadline`-free completion: the caller's timers guarantee progress.
void run_until(asio::io_context& io, const bool& done) {
  io.restart();
  while (!done && io.run_one() > 0) {
  }
}

// Gives queued frames (an error, a refusal) up to a second to leave.
void flush(asio::io_context& io, const std::vector<std::shared_ptr<Link>>& links) {
  auto until = Clock::now() + std::chrono::seconds(1);
  io.restart();
  io.poll();  // the sends posted so far join their links' queues
  while (Clock::now() < until &&
         std::any_of(links.begin(), links.end(), [](const auto& l) { return l && !l->ended() && !l->idle(); }))
    io.run_one_for(std::chrono::milliseconds(20));
}

tcp::endpoint resolve(asio::io_context& io, const RankEnv& env) {
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto results = resolver.resolve(env.master_addr, std::to_string(env.master_port), ec);
  if (ec || results.empty())
    throw RendezvousError(fmt::format("cannot resolve MASTER_ADDR '{}': {}", env.master_addr, ec ? ec.message() : "no address"));
  return results.begin()->endpoint();
}

// What differs between two JSON objects' top-level fields, as "seed 5 against 1, steps 3 against 2" (the
// whole texts when they are not objects).
std::string json_diff(const std::string& theirs, const std::string& ours) {
  try {
    auto a = nlohmann::json::parse(theirs), b = nlohmann::json::parse(ours);
    if (!a.is_object() || !b.is_object()) throw std::invalid_argument("");
    std::string out;
    for (auto& [k, v] : b.items()) {
      std::string x = a.contains(k) ? a[k].dump() : "nothing";
      if (x != v.dump()) out += fmt::format("{}{} {} against {}", out.empty() ? "" : ", ", k, x, v.dump());
    }
    for (auto& [k, v] : a.items())
      if (!b.contains(k)) out += fmt::format("{}{} {} against nothing", out.empty() ? "" : ", ", k, v.dump());
    return out.empty() ? theirs + " against " + ours : out;
  } catch (const std::exception&) {
    return theirs + " against " + ours;
  }
}

// ---- rank 0 ----
std::unique_ptr<ProcessGroup> serve(const RankEnv& env, const JobIdentity& id, const RendezvousOptions& o) {
  auto group = std::make_unique<TcpGroup>(0, env.world_size, env.local_rank, o);
  asio::io_context& io = group->io();
  const tcp::endpoint where = resolve(io, env);
  tcp::acceptor acceptor(io);
  boost::system::error_code ec;
  acceptor.open(where.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(where, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw RendezvousError(fmt::format("rank 0 cannot listen on {}:{} (MASTER_ADDR:MASTER_PORT): {}", env.master_addr,
                                      env.master_port, ec.message()));

  const auto start = Clock::now(), deadline = start + seconds(o.timeout_seconds);
  std::vector<std::shared_ptr<Link>> all;                   // every connection, to close the refused ones
  std::vector<std::shared_ptr<Link>> by_rank(env.world_size);  // the accepted ones
  int joined = 1;
  bool done = false;
  std::string error;
  auto log = [&](const std::string& m) {
    if (o.log) o.log(m);
  };
  auto fail_job = [&](const std::string& why, Link* also) {
    if (done) return;
    done = true;
    error = why;
    for (auto& l : by_rank)
      if (l) {
        Frame f;
        f.kind = kError, f.tag = why;
        l->send(std::move(f));
      }
    if (also && also->rank < 0) {
      Frame f;
      f.kind = kError, f.tag = why;
      also->send(std::move(f));
    }
  };
  auto refuse = [&](Link& l, const std::string& why) {
    log(fmt::format("rank 0 turned away a connection from {}: {}", l.peer(), why));
    Frame f;
    f.kind = kRefused, f.tag = "rank 0 refused this process: " + why;
    l.send(std::move(f));
    l.finish_sending();
  };
  auto on_hello = [&](Link& l, Frame&& f) {
    if (done || l.rank >= 0) return;  // nothing else is expected before the welcome
    if (f.kind != kHello) return refuse(l, "it did not introduce itself");
    nlohmann::json h;
    try {
      h = nlohmann::json::parse(f.data.begin(), f.data.end());
      (void)h.at("rank").get<int>();
    } catch (const std::exception&) {
      return refuse(l, "its introduction is malformed");
    }
    const int r = h.value("rank", -1), w = h.value("world_size", -1);
    const std::string token = h.value("token", std::string());
    if (!constant_time_equal(token, o.token))
      return refuse(l, fmt::format("{} (it claims rank {}): TRAINSIM_TOKEN must be the job's token",
                                   token.empty() ? "it presented no token" : "it presented a wrong token", r));
    const std::string who = fmt::format("rank {} ({}, host {})", r, l.peer(), h.value("host", std::string("?")));
    if (h.value("protocol", 0) != kProtocol)
      return fail_job(fmt::format("{} speaks rendezvous protocol {}, rank 0 speaks {}: run the same trainsim everywhere",
                                  who, h.value("protocol", 0), kProtocol), &l);
    if (w != env.world_size)
      return fail_job(fmt::format("{} says the world has {} ranks, rank 0 says {}: every rank must be started with the "
                                  "same world size (WORLD_SIZE, SLURM_NTASKS or OMPI_COMM_WORLD_SIZE)",
                                  who, w, env.world_size), &l);
    if (r == 0)
      return fail_job(fmt::format("two processes claim rank 0: this one and {}", l.peer()), &l);
    if (r < 0 || r >= env.world_size)
      return fail_job(fmt::format("{} is out of range for a world of {}", who, env.world_size), &l);
    if (by_rank[r])
      return fail_job(fmt::format("two processes claim rank {}: {} and {}; every rank must be started once", r,
                                  by_rank[r]->peer(), l.peer()), &l);
    if (h.value("schedule_hash", std::string()) != id.schedule_hash)
      return fail_job(fmt::format("{} replays a different schedule from rank 0 (schedule hash {} against {}): every "
                                  "rank must replay the same schedule file with the same options",
                                  who, h.value("schedule_hash", std::string()), id.schedule_hash), &l);
    if (h.value("model", std::string()) != id.model)
      return fail_job(fmt::format("{} has a different model from rank 0's: {}", who,
                                  json_diff(h.value("model", std::string()), id.model)), &l);
    if (h.value("settings", std::string()) != id.settings)
      return fail_job(fmt::format("{} has different settings from rank 0's: {}", who,
                                  json_diff(h.value("settings", std::string()), id.settings)), &l);
    l.rank = r;
    for (auto& c : all)
      if (c.get() == &l) by_rank[r] = c;
    ++joined;
    Frame wait;
    wait.kind = kWait, wait.dst = r;
    wait.count = static_cast<std::uint64_t>(
        std::max<long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
    l.send(std::move(wait));
    if (joined < env.world_size) return;
    done = true;
  };
  auto on_gone = [&](Link& l, const std::string& why) {
    if (done || l.rank < 0) return;
    fail_job(fmt::format("rank {} ({}) left during the rendezvous ({}): its process died or was stopped", l.rank,
                         l.peer(), why), nullptr);
  };

  std::function<void()> accept_loop = [&] {
    acceptor.async_accept([&](boost::system::error_code aec, tcp::socket s) {
      if (done) return;
      if (!aec) {
        std::string peer = endpoint_name(s);
        auto link = std::make_shared<Link>(std::move(s), peer);
        all.push_back(link);
        Link* raw = link.get();
        link->start([&, raw](Frame&& f) { on_hello(*raw, std::move(f)); },
                    [&, raw](const std::string& why) { on_gone(*raw, why); });
      }
      accept_loop();
    });
  };
  accept_loop();
  asio::steady_timer timer(io, deadline);
  timer.async_wait([&](boost::system::error_code tec) {
    if (tec || done) return;
    std::string missing;
    for (int r = 1; r < env.world_size; ++r)
      if (!by_rank[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    fail_job(fmt::format("the rendezvous timed out after {:g} s: rank(s) {} did not join ({} of {} ranks reached rank 0 "
                         "at {}:{})",
                         o.timeout_seconds, missing, joined, env.world_size, env.master_addr, env.master_port),
             nullptr);
  });
  run_until(io, done);
  acceptor.close(ec);
  timer.cancel();
  if (error.empty()) {
    for (auto& l : all)
      if (l->rank < 0) l->close();
    JobId job = fresh_job_id();
    group->adopt(by_rank, job);
    io.restart();
    io.poll();  // the cancelled accept and timer: their handlers refer to this function's locals
    group->run();
    for (auto& l : by_rank)
      if (l) {
        Frame f;
        f.kind = kWelcome, f.dst = l->rank;
        f.data.assign(job.begin(), job.end());
        l->send(std::move(f));
      }
    return group;
  }
  flush(io, all);
  for (auto& l : all) l->close();
  io.restart();
  io.poll();
  throw RendezvousError(error);
}

// ---- the other ranks ----
std::unique_ptr<ProcessGroup> join(const RankEnv& env, const JobIdentity& id, const RendezvousOptions& o) {
  auto group = std::make_unique<TcpGroup>(env.rank, env.world_size, env.local_rank, o);
  asio::io_context& io = group->io();
  auto deadline = Clock::now() + seconds(o.timeout_seconds);
  const std::string rank0 = fmt::format("rank 0 at {}:{}", env.master_addr, env.master_port);
  bool done = false, connected = false, waiting = false;
  std::string error, last_error = "no attempt";
  JobId job{};
  std::shared_ptr<Link> link;
  const tcp::endpoint where = resolve(io, env);
  nlohmann::json hello{{"protocol", kProtocol},       {"rank", env.rank},          {"world_size", env.world_size},
                       {"local_rank", env.local_rank}, {"token", o.token},         {"schedule_hash", id.schedule_hash},
                       {"model", id.model},            {"settings", id.settings},  {"host", host_name()}};
  const std::string hello_text = hello.dump();

  asio::steady_timer timer(io, deadline), retry(io);
  std::function<void()> arm_deadline = [&] {
    timer.expires_at(deadline);
    timer.async_wait([&](boost::system::error_code tec) {
      if (tec || done) return;
      done = true;
      error = connected ? fmt::format("{} did not finish the rendezvous in time (rank {} waited {:g} s)", rank0, env.rank,
                                      o.timeout_seconds)
                        : fmt::format("could not reach {} within {:g} s ({}): is rank 0 running, and are MASTER_ADDR and "
                                      "MASTER_PORT the same for every rank?",
                                      rank0, o.timeout_seconds, last_error);
    });
  };
  auto on_frame = [&](Frame&& f) {
    if (done) return;
    switch (f.kind) {
      case kWait:
        // rank 0 decides by its deadline; wait for its verdict a little longer than that
        waiting = true;
        deadline = Clock::now() + std::chrono::milliseconds(f.count) + std::chrono::seconds(5);
        arm_deadline();
        return;
      case kRefused:
      case kError:
        done = true, error = f.tag;
        return;
      case kWelcome:
        if (f.data.size() != job.size()) {
          done = true, error = fmt::format("{} sent a malformed job id", rank0);
          return;
        }
        std::copy(f.data.begin(), f.data.end(), job.begin());
        done = true;
        return;
      default:
        return;
    }
  };
  std::function<void()> attempt = [&] {
    auto sock = std::make_shared<tcp::socket>(io);
    sock->async_connect(where, [&, sock](boost::system::error_code cec) {
      if (done) return;
      if (cec) {
        last_error = cec.message();
        retry.expires_after(std::chrono::milliseconds(100));
        retry.async_wait([&](boost::system::error_code rec) {
          if (!rec && !done) attempt();
        });
        return;
      }
      connected = true;
      link = std::make_shared<Link>(std::move(*sock), rank0);
      link->rank = 0;
      link->start(on_frame, [&](const std::string& why) {
        if (done) return;
        done = true;
        error = fmt::format("{} closed the connection during the rendezvous ({}){}", rank0, why,
                            waiting ? "" : ": is that port another program's?");
      });
      Frame h;
      h.kind = kHello, h.src = env.rank, h.dst = 0;
      h.data.assign(hello_text.begin(), hello_text.end());
      link->send(std::move(h));
    });
  };
  arm_deadline();
  attempt();
  run_until(io, done);
  timer.cancel();
  retry.cancel();
  if (!error.empty()) {
    if (link) link->close();
    io.restart();
    io.poll();
    throw RendezvousError(error);
  }
  group->adopt({link}, job);  // before polling: frames rank 0 sends after the welcome are the group's
  io.restart();
  io.poll();  // the cancelled timers: their handlers refer to this function's locals
  group->run();
  return group;
}

}  // namespace

bool constant_time_equal(const std::string& a, const std::string& b) {
  const std::size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

std::unique_ptr<ProcessGroup> rendezvous(const RankEnv& env, const JobIdentity& identity, const RendezvousOptions& options) {
  if (env.world_size < 2) throw RendezvousError("a rendezvous needs at least 2 ranks");
  return env.rank == 0 ? serve(env, identity, options) : join(env, identity, options);
}

}  // namespace trainsim::exec::dist
