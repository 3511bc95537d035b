// Every other rank's side of the rendezvous (exec/dist/rendezvous.h):
//   connect (retrying every 100 ms until this rank's deadline, also when a connection ends before rank 0 has
//   proven the token)
//   -> kHello {protocol, rank, nonce}
//   <- kChallenge rank 0's nonce | rank 0's proof: checked before anything else; wrong: this rank stops, having
//      sent nothing that depends on the token
//   -> kProof this rank's proof, kIntro {rank, world_size, ...}   (with MACs from here on, both ways)
//   <- kWait (bounded by this rank's own --rendezvous-timeout), then kWelcome or kError
// Until rank 0 has proven the token, a refusal is reported as rank 0's unverified word (it ends this rank: an
// honest configuration error is reported at once; whoever could forge one, on the port or on the path, can
// as well keep every packet from rank 0 and so end this rank at its deadline), anything else it sends ends
// the attempt, and nothing it says can make this rank wait longer than its own deadline.
#include <boost/asio/connect.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "exec/deadline.h"
#include "exec/dist/handshake.h"
#include "exec/dist/rendezvous_internal.h"
#include "exec/dist/tcp_group.h"

namespace trainsim::exec::dist {

namespace {

constexpr auto kGrace = std::chrono::seconds(5);  // beyond rank 0's announced deadline, for its verdict to arrive

class Joiner {
 public:
  Joiner(const RankEnv& env, const JobIdentity& id, const RendezvousOptions& o, TcpGroup& group)
      : env_(env), id_(id), o_(o), io_(group.io()), timer_(io_), retry_(io_),
        rank0_(fmt::format("rank 0 at {}:{}", env.master_addr, env.master_port)) {}

  std::unique_ptr<ProcessGroup> run(std::unique_ptr<TcpGroup> group);

 private:
  enum Stage { kConnecting, kAwaitChallenge, kAuthenticated };
  void fail(const std::string& why) {
    if (done_) return;
    done_ = true;
    error_ = why;
  }
  void arm(Clock::time_point deadline);
  void on_deadline();
  void attempt();
  void on_frame(Frame&& f);
  void on_challenge(Frame&& f);
  void on_end(const std::string& why);

  const RankEnv& env_;
  const JobIdentity& id_;
  const RendezvousOptions& o_;
  asio::io_context& io_;
  asio::steady_timer timer_, retry_;
  const std::string rank0_;
  Stage stage_ = kConnecting;
  bool done_ = false;
  double told_seconds_ = 0;  // the wait rank 0 announced, as bounded here
  std::string error_, last_error_ = "no attempt";
  Nonce nonce_{};
  JobId job_{};
  std::shared_ptr<Link> link_;
  tcp::endpoint where_;
};

void Joiner::arm(Clock::time_point deadline) {
  timer_.expires_at(deadline);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_deadline();
  });
}

void Joiner::on_deadline() {
  switch (stage_) {
    case kConnecting:
      return fail(fmt::format("could not reach {} within {:g} s ({}): is rank 0 running, and are MASTER_ADDR and "
                              "MASTER_PORT the same for every rank?",
                              rank0_, o_.timeout_seconds, last_error_));
    case kAwaitChallenge:
      return fail(fmt::format("{} did not prove the job's token within rank {}'s {:g} s: is that port another program's?",
                              rank0_, env_.rank, o_.timeout_seconds));
    case kAuthenticated:
      return fail(fmt::format("{} did not finish the rendezvous in time (rank {} waited {:g} s for its verdict)", rank0_,
                              env_.rank, told_seconds_ > 0 ? told_seconds_ : o_.timeout_seconds));
  }
}

void Joiner::attempt() {
  auto sock = std::make_shared<tcp::socket>(io_);
  sock->async_connect(where_, [this, sock](boost::system::error_code ec) {
    if (done_) return;
    if (ec) {
      last_error_ = ec.message();
      retry_.expires_after(std::chrono::milliseconds(100));
      retry_.async_wait([this](boost::system::error_code rec) {
        if (!rec && !done_) attempt();
      });
      return;
    }
    stage_ = kAwaitChallenge;
    link_ = std::make_shared<Link>(std::move(*sock), rank0_);  // frames bounded by kMaxUnauthenticatedBody
    link_->rank = 0;
    link_->start([this](Frame&& f) { on_frame(std::move(f)); }, [this](const std::string& why) { on_end(why); });
    nonce_ = fresh_nonce();
    const nlohmann::json hello{{"protocol", kRendezvousProtocol}, {"rank", env_.rank},
                               {"nonce", to_hex(nonce_.data(), nonce_.size())}};
    const std::string text = hello.dump();
    Frame h;
    h.kind = kHello, h.src = env_.rank, h.dst = 0;
    h.data.assign(text.begin(), text.end());
    link_->send(std::move(h));
  });
}

void Joiner::on_challenge(Frame&& f) {
  if (f.kind == kRefused)
    return fail(fmt::format("{} refused this process before proving the job's token (its words, unverified): '{}'",
                            rank0_, peer_text(f.tag)));
  if (f.kind != kChallenge)
    return fail(fmt::format("{} sent a frame of kind {} before proving the job's token: it is not a trainsim rank 0 "
                            "speaking rendezvous protocol {} (run the same trainsim on every rank)",
                            rank0_, int{f.kind}, kRendezvousProtocol));
  if (f.data.size() != kNonceBytes + kProofBytes)
    return fail(fmt::format("{} sent a malformed challenge: it is not a trainsim rank 0 speaking rendezvous protocol {}",
                            rank0_, kRendezvousProtocol));
  Nonce theirs;
  std::copy(f.data.begin(), f.data.begin() + kNonceBytes, theirs.begin());
  const Proof expected = make_proof(o_.token, Role::rank0, nonce_, theirs, env_.rank);
  if (!proof_matches(expected, f.data.data() + kNonceBytes, kProofBytes))
    return fail(fmt::format("{} did not prove the job's token: its TRAINSIM_TOKEN differs from rank {}'s, or the "
                            "process on that port is not this job's rank 0",
                            rank0_, env_.rank));
  // rank 0 is authentic: everything from here on carries a MAC, and its frames may be the job's
  stage_ = kAuthenticated;
  link_->protect(session_keys(o_.token, Role::peer, nonce_, theirs, env_.rank));
  link_->set_max_body(kMaxFrameBody);
  const Proof mine = make_proof(o_.token, Role::peer, nonce_, theirs, env_.rank);
  Frame p;
  p.kind = kProof, p.src = env_.rank, p.dst = 0;
  p.data.assign(mine.begin(), mine.end());
  link_->send(std::move(p));
  const nlohmann::json intro{{"rank", env_.rank},         {"world_size", env_.world_size}, {"local_rank", env_.local_rank},
                             {"schedule_hash", id_.schedule_hash}, {"model", id_.model},   {"settings", id_.settings},
                             {"host", host_name()}};
  const std::string text = intro.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  Frame i;
  i.kind = kIntro, i.src = env_.rank, i.dst = 0;
  i.data.assign(text.begin(), text.end());
  link_->send(std::move(i));
}

void Joiner::on_frame(Frame&& f) {
  if (done_) return;
  if (stage_ != kAuthenticated) return on_challenge(std::move(f));
  switch (f.kind) {
    case kWait: {
      // rank 0 decides by its deadline: wait for its verdict a little longer than that, but never longer than
      // this rank's own --rendezvous-timeout from now
      Clock::duration told = duration_from_milliseconds(f.count);
      told = told > Clock::duration::max() - kGrace ? Clock::duration::max() : told + kGrace;
      told = std::min(told, duration_from_seconds(o_.timeout_seconds));
      told_seconds_ = std::chrono::duration<double>(told).count();
      arm(saturating_add(Clock::now(), told));
      return;
    }
    case kRefused:
    case kError:
      return fail(peer_text(f.tag, 2000));
    case kWelcome:
      if (f.data.size() != job_.size()) return fail(fmt::format("{} sent a malformed job id", rank0_));
      std::copy(f.data.begin(), f.data.end(), job_.begin());
      done_ = true;
      return;
    default:
      return;
  }
}

void Joiner::on_end(const std::string& why) {
  if (done_) return;
  if (stage_ == kAwaitChallenge) {
    // Unverified: whoever closed this connection has proven nothing, so it decides nothing. Try again (rank 0
    // may not be up yet, or was busy) until this rank's deadline, which then names this last failure.
    stage_ = kConnecting;
    last_error_ = fmt::format("the last connection ended before rank 0 proved the job's token: {}", why);
    retry_.expires_after(std::chrono::milliseconds(100));
    retry_.async_wait([this](boost::system::error_code rec) {
      if (!rec && !done_) attempt();
    });
    return;
  }
  fail(fmt::format("{} closed the connection during the rendezvous ({})", rank0_, why));
}

std::unique_ptr<ProcessGroup> Joiner::run(std::unique_ptr<TcpGroup> group) {
  where_ = resolve(io_, env_);  // (a name that cannot be resolved is an error at once, not at the deadline)
  arm(deadline_after(o_.timeout_seconds));
  attempt();
  run_until(io_, done_);
  timer_.cancel();
  retry_.cancel();
  if (!error_.empty()) {
    if (link_) link_->close();
    io_.restart();
    io_.poll();  // the cancelled handlers refer to this object
    throw RendezvousError(error_);
  }
  group->adopt({link_}, job_);  // before polling: frames rank 0 sends after the welcome are the group's
  io_.restart();
  io_.poll();  // the cancelled timers: their handlers refer to this object
  group->run();
  return group;
}

}  // namespace

std::unique_ptr<ProcessGroup> join(const RankEnv& env, const JobIdentity& id, const RendezvousOptions& o) {
  auto group = std::make_unique<TcpGroup>(env.rank, env.world_size, env.local_rank, o);
  Joiner joiner(env, id, o, *group);
  return joiner.run(std::move(group));
}

}  // namespace trainsim::exec::dist
