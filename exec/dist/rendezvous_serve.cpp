// Rank 0's side of the rendezvous (exec/dist/rendezvous.h). Per connection:
//   hello    <- kHello {protocol, rank, nonce}             (before authentication: 4 KiB at most)
//            -> kChallenge rank 0's nonce | rank 0's proof  (from here on every frame carries a MAC)
//   proof    <- kProof the peer's proof                     (wrong: turned away)
//   intro    <- kIntro {rank, world_size, ..., settings}    (authenticated: a mismatch fails the job)
//   joined   -> kWait, later kWelcome or kError
// A connection is turned away (logged once, told why, closed) when anything arrives out of place, and when it
// has not reached `joined` within the handshake deadline. At most `max_pending` connections are in their
// handshake at once; accepting pauses (and backs off after an error such as EMFILE) rather than spinning.
#include <algorithm>
#include <map>

#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "exec/deadline.h"
#include "exec/dist/handshake.h"
#include "exec/dist/rendezvous_internal.h"
#include "exec/dist/tcp_group.h"

namespace trainsim::exec::dist {

namespace {

constexpr std::uint64_t kMaxIntroBytes = std::uint64_t{1} << 20;  // the identity: schedule hash, model, settings
constexpr auto kLinger = std::chrono::seconds(1);                 // a refusal's time to leave before the close

JobId fresh_job_id() {
  JobId id{};
  random_bytes(id.data(), id.size());
  return id;
}

struct Conn {
  enum Stage { kAwaitHello, kAwaitProof, kAwaitIntro, kJoined, kDropped };
  std::shared_ptr<Link> link;
  asio::steady_timer timer;  // the handshake deadline, then a refusal's linger
  Stage stage = kAwaitHello;
  bool holds_slot = true;  // counts against max_pending until it joins or closes
  int claimed = -1;        // the rank the hello claims (bound into the proofs)
  Nonce peer_nonce{}, rank0_nonce{};
  explicit Conn(asio::io_context& io) : timer(io) {}
  std::string who() const {
    return claimed >= 0 ? fmt::format("{} (it claims rank {})", link->peer(), claimed) : link->peer();
  }
};

class Server {
 public:
  Server(const RankEnv& env, const JobIdentity& id, const RendezvousOptions& o, TcpGroup& group)
      : env_(env), id_(id), o_(o), io_(group.io()), group_(group), acceptor_(io_), deadline_timer_(io_), retry_(io_),
        by_rank_(env.world_size) {}

  std::unique_ptr<ProcessGroup> run(std::unique_ptr<TcpGroup> group);

 private:
  void log(const std::string& m) {
    if (o_.log) o_.log(m);
  }
  // One line per connection turned away (or accept() episode that failed), the first max_logged of them;
  // then the connections are only counted, and the count is reported when the rendezvous ends.
  void note(const std::string& line, bool turned_away = true) {
    turned_away_ += turned_away;
    ++lines_;
    if (lines_ <= o_.max_logged) log(line);
    else if (lines_ == o_.max_logged + 1)
      log("rank 0 turned away more connections: from now on it counts them and reports the number when the rendezvous "
          "ends");
  }
  void accept();
  void on_accept_error(const boost::system::error_code& ec);
  void add(tcp::socket s);
  void on_frame(const std::shared_ptr<Conn>& c, Frame&& f);
  void on_hello(const std::shared_ptr<Conn>& c, Frame&& f);
  void on_proof(const std::shared_ptr<Conn>& c, Frame&& f);
  void on_intro(const std::shared_ptr<Conn>& c, Frame&& f);
  void on_end(const std::shared_ptr<Conn>& c, const std::string& why);
  void drop(const std::shared_ptr<Conn>& c, const std::string& why);
  void release(Conn& c);
  void fail_job(const std::string& why);
  void on_deadline();

  const RankEnv& env_;
  const JobIdentity& id_;
  const RendezvousOptions& o_;
  asio::io_context& io_;
  TcpGroup& group_;
  tcp::acceptor acceptor_;
  asio::steady_timer deadline_timer_, retry_;
  Clock::time_point deadline_{};
  std::map<Conn*, std::shared_ptr<Conn>> conns_;  // open and not joined
  std::vector<std::shared_ptr<Link>> by_rank_;     // the joined ones
  std::vector<std::shared_ptr<Conn>> joined_;
  int joined_count_ = 1, pending_ = 0, turned_away_ = 0, lines_ = 0;
  bool accepting_ = false, accept_failing_ = false, done_ = false;
  Clock::duration backoff_{};
  std::string error_;
};

void Server::accept() {
  if (done_ || accepting_ || pending_ >= std::max(1, o_.max_pending) || retry_.expiry() > Clock::now()) return;
  accepting_ = true;
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket s) {
    accepting_ = false;
    if (done_ || ec == asio::error::operation_aborted) return;
    if (ec) return on_accept_error(ec);
    accept_failing_ = false;
    backoff_ = {};
    add(std::move(s));
    accept();
  });
}

// accept() failed (EMFILE: out of descriptors, ENFILE, ENOBUFS, ...): the connection stays in the backlog, so
// trying again at once would spin. Pause, longer each time (10 ms to 1 s); one log line per episode.
void Server::on_accept_error(const boost::system::error_code& ec) {
  if (!accept_failing_) {
    accept_failing_ = true;
    note(fmt::format("rank 0 cannot accept a connection ({}): it pauses and tries again; the connections it holds go on",
                     ec.message()),
         false);
  }
  backoff_ = std::clamp<Clock::duration>(backoff_ * 2, std::chrono::milliseconds(10), std::chrono::seconds(1));
  retry_.expires_after(backoff_);
  retry_.async_wait([this](boost::system::error_code tec) {
    if (!tec) accept();
  });
}

void Server::add(tcp::socket s) {
  auto c = std::make_shared<Conn>(io_);
  std::string peer = endpoint_name(s);
  c->link = std::make_shared<Link>(std::move(s), std::move(peer));  // frames bounded by kMaxUnauthenticatedBody
  conns_[c.get()] = c;
  ++pending_;
  std::weak_ptr<Conn> weak = c;  // (the link must not own its Conn: the Conn owns the link)
  c->link->start(
      [this, weak](Frame&& f) {
        if (auto cc = weak.lock()) on_frame(cc, std::move(f));
      },
      [this, weak](const std::string& why) {
        if (auto cc = weak.lock()) on_end(cc, why);
      });
  c->timer.expires_at(deadline_after(o_.handshake_seconds));
  c->timer.async_wait([this, c](boost::system::error_code ec) {
    if (ec || done_ || c->stage == Conn::kJoined || c->stage == Conn::kDropped) return;
    drop(c, fmt::format("it did not prove the job's token and introduce itself within {:g} s of connecting",
                        o_.handshake_seconds));
  });
}

void Server::on_frame(const std::shared_ptr<Conn>& c, Frame&& f) {
  if (done_) return;
  switch (c->stage) {
    case Conn::kAwaitHello: return on_hello(c, std::move(f));
    case Conn::kAwaitProof: return on_proof(c, std::move(f));
    case Conn::kAwaitIntro: return on_intro(c, std::move(f));
    default: return;  // joined: nothing is expected before the welcome; dropped: nothing is read any more
  }
}

void Server::on_hello(const std::shared_ptr<Conn>& c, Frame&& f) {
  if (f.kind != kHello) return drop(c, fmt::format("it sent a frame of kind {} instead of introducing itself", int{f.kind}));
  auto h = json_object(f.data);
  if (!h) return drop(c, "its hello is not a JSON object (not a trainsim rank)");
  const auto protocol = json_int(*h, "protocol");
  if (!protocol) return drop(c, "its hello has no protocol number (not a trainsim rank)");
  if (*protocol != kRendezvousProtocol)
    return drop(c, fmt::format("it speaks rendezvous protocol {}, rank 0 speaks {}: run the same trainsim on every rank",
                               *protocol, kRendezvousProtocol));
  const auto rank = json_int(*h, "rank");
  const auto nonce = json_string(*h, "nonce");
  if (!rank || *rank < 0) return drop(c, "its hello has no valid rank");
  c->claimed = *rank;
  if (!nonce || !from_hex(*nonce, c->peer_nonce.data(), c->peer_nonce.size()))
    return drop(c, "its hello has no valid nonce");
  c->rank0_nonce = fresh_nonce();
  const Proof mine = make_proof(o_.token, Role::rank0, c->peer_nonce, c->rank0_nonce, c->claimed);
  Frame ch;
  ch.kind = kChallenge;
  ch.data.assign(c->rank0_nonce.begin(), c->rank0_nonce.end());
  ch.data.insert(ch.data.end(), mine.begin(), mine.end());
  c->link->send(std::move(ch));  // the last frame without a MAC
  c->link->protect(session_keys(o_.token, Role::rank0, c->peer_nonce, c->rank0_nonce, c->claimed));
  c->stage = Conn::kAwaitProof;
}

void Server::on_proof(const std::shared_ptr<Conn>& c, Frame&& f) {
  if (f.kind != kProof) return drop(c, fmt::format("it sent a frame of kind {} instead of its proof of the token", int{f.kind}));
  const Proof expected = make_proof(o_.token, Role::peer, c->peer_nonce, c->rank0_nonce, c->claimed);
  if (!proof_matches(expected, f.data.data(), f.data.size()))
    return drop(c, "its proof of the job's token is wrong");
  c->stage = Conn::kAwaitIntro;  // authenticated: a job member from here on
  c->link->set_max_body(kMaxIntroBytes);
}

void Server::on_intro(const std::shared_ptr<Conn>& c, Frame&& f) {
  Conn& l = *c;
  const std::string at = l.link->peer();
  if (f.kind != kIntro)
    return fail_job(fmt::format("rank {} ({}) sent a frame of kind {} instead of its introduction", l.claimed, at,
                                int{f.kind}));
  auto h = json_object(f.data);
  const auto r = h ? json_int(*h, "rank") : std::nullopt;
  const auto w = h ? json_int(*h, "world_size") : std::nullopt;
  const auto hash = h ? json_string(*h, "schedule_hash") : std::nullopt;
  const auto model = h ? json_string(*h, "model") : std::nullopt;
  const auto settings = h ? json_string(*h, "settings") : std::nullopt;
  const std::string host = h ? json_string(*h, "host").value_or("?") : "?";
  if (!r || !w || !hash || !model || !settings)
    return fail_job(fmt::format("rank {} ({}) sent a malformed introduction (a field is missing or of the wrong type): "
                                "run the same trainsim on every rank",
                                l.claimed, at));
  const int rank = *r, world = *w;  // (plain values from here: the checks above hold them)
  if (rank != l.claimed)
    return fail_job(fmt::format("the process at {} proved the token as rank {} but introduces itself as rank {}", at,
                                l.claimed, rank));
  const std::string who = fmt::format("rank {} ({}, host {})", rank, at, peer_text(host, 64));
  if (world != env_.world_size)
    return fail_job(fmt::format("{} says the world has {} ranks, rank 0 says {}: every rank must be started with the "
                                "same world size (WORLD_SIZE, SLURM_NTASKS or OMPI_COMM_WORLD_SIZE)",
                                who, world, env_.world_size));
  if (rank == 0) return fail_job(fmt::format("two processes claim rank 0: this one and {}", at));
  if (rank >= env_.world_size) return fail_job(fmt::format("{} is out of range for a world of {}", who, env_.world_size));
  if (by_rank_[rank])
    return fail_job(fmt::format("two processes claim rank {}: {} and {}; every rank must be started once", rank,
                                by_rank_[rank]->peer(), at));
  if (*hash != id_.schedule_hash)
    return fail_job(fmt::format("{} replays a different schedule from rank 0 (schedule hash {} against {}): every "
                                "rank must replay the same schedule file with the same options",
                                who, peer_text(*hash, 80), id_.schedule_hash));
  if (*model != id_.model)
    return fail_job(fmt::format("{} has a different model from rank 0's: {}", who, json_diff(*model, id_.model)));
  if (*settings != id_.settings)
    return fail_job(fmt::format("{} has different settings from rank 0's: {}", who, json_diff(*settings, id_.settings)));
  l.stage = Conn::kJoined;
  l.timer.cancel();
  l.link->rank = rank;
  l.link->set_max_body(kMaxFrameBody);
  by_rank_[rank] = l.link;
  joined_.push_back(c);
  conns_.erase(c.get());
  release(l);
  ++joined_count_;
  Frame wait;
  wait.kind = kWait, wait.dst = rank;
  wait.count = static_cast<std::uint64_t>(std::max<std::int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count()));
  l.link->send(std::move(wait));
  if (joined_count_ == env_.world_size) done_ = true;
}

void Server::on_end(const std::shared_ptr<Conn>& c, const std::string& why) {
  const Conn::Stage stage = c->stage;
  c->stage = Conn::kDropped;
  c->timer.cancel();
  conns_.erase(c.get());
  release(*c);
  if (done_) return;
  if (stage == Conn::kJoined)
    return fail_job(fmt::format("rank {} ({}) left during the rendezvous ({}): its process died or was stopped",
                                c->link->rank, c->link->peer(), why));
  if (stage == Conn::kAwaitHello || stage == Conn::kAwaitProof)
    note(fmt::format("rank 0 turned away a connection from {}: its connection ended ({}) before it proved the job's "
                     "token{}",
                     c->who(), why,
                     stage == Conn::kAwaitProof ? " (a rank whose TRAINSIM_TOKEN differs from rank 0's stops here)" : ""));
  else if (stage == Conn::kAwaitIntro)
    note(fmt::format("rank 0 turned away a connection from {}: it proved the job's token, then its connection ended ({}) "
                     "before it introduced itself",
                     c->who(), why));
}

// Turns a connection away: one log line, a refusal it may read (our words only), then the close.
void Server::drop(const std::shared_ptr<Conn>& c, const std::string& why) {
  if (c->stage == Conn::kDropped) return;
  c->stage = Conn::kDropped;
  note(fmt::format("rank 0 turned away a connection from {}: {}", c->who(), why));
  Frame f;
  f.kind = kRefused, f.tag = "rank 0 refused this process: " + why;
  c->link->send(std::move(f));
  c->link->finish_sending();
  c->timer.expires_after(kLinger);
  c->timer.async_wait([c](boost::system::error_code ec) {
    if (!ec) c->link->close();
  });
}

void Server::release(Conn& c) {
  if (!c.holds_slot) return;
  c.holds_slot = false;
  --pending_;
  accept();
}

void Server::fail_job(const std::string& why) {
  if (done_) return;
  done_ = true;
  error_ = why;
  for (auto& l : by_rank_)
    if (l) {
      Frame f;
      f.kind = kError, f.tag = why;
      l->send(std::move(f));
    }
  // The connections in their handshake: those rank 0 has proven itself to (their frames carry MACs from here
  // on) get the reason; the others only that the job is over, in case they are not the job's.
  for (auto& [p, c] : conns_) {
    if (c->stage == Conn::kDropped) continue;
    Frame f;
    f.kind = c->stage == Conn::kAwaitHello ? kRefused : kError;
    f.tag = c->stage == Conn::kAwaitHello ? "rank 0 refused this process: the job failed before it proved the job's token"
                                          : why;
    c->link->send(std::move(f));
  }
}

void Server::on_deadline() {
  if (done_) return;
  std::string missing;
  for (int r = 1; r < env_.world_size; ++r)
    if (!by_rank_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  fail_job(fmt::format("the rendezvous timed out after {:g} s: rank(s) {} did not join ({} of {} ranks reached rank 0 "
                       "at {}:{})",
                       o_.timeout_seconds, missing, joined_count_, env_.world_size, env_.master_addr, env_.master_port));
}

std::unique_ptr<ProcessGroup> Server::run(std::unique_ptr<TcpGroup> group) {
  const tcp::endpoint where = resolve(io_, env_);
  boost::system::error_code ec;
  acceptor_.open(where.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(where, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw RendezvousError(fmt::format("rank 0 cannot listen on {}:{} (MASTER_ADDR:MASTER_PORT): {}", env_.master_addr,
                                      env_.master_port, ec.message()));
  deadline_ = deadline_after(o_.timeout_seconds);
  deadline_timer_.expires_at(deadline_);
  deadline_timer_.async_wait([this](boost::system::error_code tec) {
    if (!tec) on_deadline();
  });
  accept();
  run_until(io_, done_);

  acceptor_.close(ec);
  deadline_timer_.cancel();
  retry_.cancel();
  std::vector<std::shared_ptr<Link>> all;
  for (auto& [p, c] : conns_) {
    c->timer.cancel();
    all.push_back(c->link);
  }
  for (auto& c : joined_) all.push_back(c->link);
  if (lines_ > o_.max_logged) log(fmt::format("rank 0 turned away {} connections in all during the rendezvous", turned_away_));
  if (!error_.empty()) {
    flush(io_, all);
    for (auto& l : all) l->close();
    io_.restart();
    io_.poll();  // the cancelled handlers: they refer to this object
    throw RendezvousError(error_);
  }
  auto open = conns_;  // (closing one erases it from conns_)
  for (auto& [p, c] : open) c->link->close();
  JobId job = fresh_job_id();
  group->adopt(by_rank_, job);
  io_.restart();
  io_.poll();  // the cancelled accept and timers: their handlers refer to this object
  group->run();
  for (auto& l : by_rank_)
    if (l) {
      Frame f;
      f.kind = kWelcome, f.dst = l->rank;
      f.data.assign(job.begin(), job.end());
      l->send(std::move(f));
    }
  return group;
}

}  // namespace

std::unique_ptr<ProcessGroup> serve(const RankEnv& env, const JobIdentity& id, const RendezvousOptions& o) {
  auto group = std::make_unique<TcpGroup>(0, env.world_size, env.local_rank, o);
  Server server(env, id, o, *group);
  return server.run(std::move(group));
}

}  // namespace trainsim::exec::dist
