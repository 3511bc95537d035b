// The rendezvous and the transport under attack (exec/dist/, docs/executor.md "Security and failure model"),
// in process: a real rank 0 or a real rank 1 in a thread, against hostile peers written with raw sockets
// (tests/hostile_peer.h). Before a peer proves the job's token nothing it sends costs rank 0 more than a small
// allocation, a pending slot until its handshake deadline and one clean log line; a rank believes nothing a
// fake rank 0 says and reveals nothing to it; a member's malformed or tampered frames end the job with a
// message, never a crash; deadlines built from huge numbers of seconds saturate instead of overflowing.
// Timings are checked only as bounds the code promises: never sooner than a deadline (which holds under any
// load), and a generous hang guard.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <future>
#include <mutex>
#include <new>

#include <fmt/format.h>

#include "exec/comm.h"
#include "exec/cpu/tcp_comm.h"
#include "exec/deadline.h"
#include "exec/dist/handshake.h"
#include "exec/dist/rendezvous.h"
#include "hostile_peer.h"
#include "process_helpers.h"

using namespace trainsim;
using namespace trainsim::testing;
using namespace trainsim::exec::dist;
using trainsim::exec::deadline_after;
using trainsim::exec::duration_from_seconds;
using trainsim::exec::duration_from_milliseconds;
using trainsim::exec::saturating_add;

// ---- the allocation probe: the largest single operator new while armed ----
// The test binary's global operator new (a replacement, with the matching delete): malloc, as the default,
// plus a record of the largest request while a probe is armed. It shows that a length a peer claims is
// refused before any buffer of that size is requested (today's failure: std::bad_alloc on 60 GiB, real
// allocations of 1 GiB).
namespace {
std::atomic<bool> g_probe_armed{false};
std::atomic<std::size_t> g_largest_request{0};
}  // namespace

void* operator new(std::size_t n) {
  if (g_probe_armed.load(std::memory_order_relaxed)) {
    std::size_t seen = g_largest_request.load(std::memory_order_relaxed);
    while (n > seen && !g_largest_request.compare_exchange_weak(seen, n)) {
    }
  }
  for (;;) {
    if (void* p = std::malloc(n ? n : 1)) return p;
    std::new_handler h = std::get_new_handler();
    if (!h) throw std::bad_alloc();
    h();
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

struct AllocationProbe {
  AllocationProbe() {
    g_largest_request = 0;
    g_probe_armed = true;
  }
  ~AllocationProbe() { g_probe_armed = false; }
  std::size_t largest() const { return g_largest_request.load(); }
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

const std::string kToken = "0123456789abcdef0123456789abcdef";

// Rank 0's log lines.
class LogSink {
 public:
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& m) {
      std::lock_guard lock(mu_);
      lines_.push_back(m);
    };
  }
  std::vector<std::string> lines() {
    std::lock_guard lock(mu_);
    return lines_;
  }
  std::string all() {
    std::string s;
    for (auto& l : lines()) s += l + "\n";
    return s;
  }
  int count(const std::string& what) {
    int n = 0;
    for (auto& l : lines()) n += l.find(what) != std::string::npos;
    return n;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

RendezvousOptions options(double timeout, LogSink* log = nullptr) {
  RendezvousOptions o;
  o.timeout_seconds = timeout;
  o.token = kToken;
  if (log) o.log = log->sink();
  return o;
}

RankEnv env_of(int rank, int world, int port) { return {"torchrun", rank, world, rank, "127.0.0.1", port}; }
const exec::JobIdentity kIdentity{"h", "m", "s"};

// Rank r of `world`: the rendezvous, one broadcast from rank 0, the close. "" when all went well, else the error.
std::string member(int r, int world, int port, RendezvousOptions o) {
  try {
    auto pg = rendezvous(env_of(r, world, port), kIdentity, o);
    const std::string b = pg->broadcast(r == 0 ? "done" : "", 30);
    pg->close();
    return b == "done" ? "" : "the broadcast gave '" + b + "'";
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::future<std::string> start_member(int r, int world, int port, RendezvousOptions o) {
  return std::async(std::launch::async, member, r, world, port, std::move(o));
}

// Every byte printable ASCII: no escape sequence, line break or invalid UTF-8 from a peer.
bool clean(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
}

// A communicator's stream context that the TCP communicator never uses.
struct NoStream final : exec::StreamContext {
  exec::Kernels<float>& kernels() override { throw std::logic_error("unused"); }
  int stream() const override { return 0; }
  void upload(void*, const void*, std::size_t) override {}
  void copy(void*, const void*, std::size_t) override {}
  void zero(void*, std::size_t) override {}
  void* native() override { return nullptr; }
};

}  // namespace

TEST_CASE("dist security: deadlines from huge, infinite or invalid seconds saturate instead of overflowing") {
  using std::chrono::seconds;
  CHECK(duration_from_seconds(1.5) == std::chrono::milliseconds(1500));
  CHECK(duration_from_seconds(300) == seconds(300));
  CHECK(duration_from_seconds(1e10) == Clock::duration::max());  // 1e19 ns: wrapped to a past deadline before
  CHECK(duration_from_seconds(1e300) == Clock::duration::max());
  CHECK(duration_from_seconds(std::numeric_limits<double>::infinity()) == Clock::duration::max());
  CHECK(duration_from_seconds(std::nan("")) == Clock::duration::zero());
  CHECK(duration_from_seconds(-1) == Clock::duration::zero());
  CHECK(duration_from_seconds(9e9) == seconds(9'000'000'000));  // just inside the range
  CHECK(duration_from_milliseconds(9'000'000'000'000) == std::chrono::milliseconds(9'000'000'000'000));
  CHECK(duration_from_milliseconds(~std::uint64_t{0}) == Clock::duration::max());
  const auto now = Clock::now();
  CHECK(deadline_after(1e10, now) == Clock::time_point::max());
  CHECK(deadline_after(2, now) == now + seconds(2));
  CHECK(deadline_after(-5, now) == now);
  CHECK(saturating_add(now, Clock::duration::max()) == Clock::time_point::max());

  // --rendezvous-timeout 1e10 timed out at once: the deadline wrapped into the past
  const int port = free_local_port();
  auto rank0 = start_member(0, 2, port, options(1e10));
  CHECK(member(1, 2, port, options(1e10)) == "");
  CHECK(rank0.get() == "");
}

TEST_CASE("dist security: the handshake's proofs and keys depend on the token, both nonces, the role and the rank") {
  const Nonce a = fresh_nonce(), b = fresh_nonce();
  CHECK(a != b);
  const Proof p = make_proof(kToken, Role::peer, a, b, 1);
  CHECK(proof_matches(p, make_proof(kToken, Role::peer, a, b, 1).data(), kProofBytes));
  CHECK_FALSE(proof_matches(p, make_proof(kToken, Role::rank0, a, b, 1).data(), kProofBytes));  // no reflection
  CHECK_FALSE(proof_matches(p, make_proof(kToken, Role::peer, b, a, 1).data(), kProofBytes));
  CHECK_FALSE(proof_matches(p, make_proof(kToken, Role::peer, a, b, 2).data(), kProofBytes));  // bound to the rank
  CHECK_FALSE(proof_matches(p, make_proof(kToken + "x", Role::peer, a, b, 1).data(), kProofBytes));
  CHECK_FALSE(proof_matches(p, p.data(), kProofBytes - 1));
  const SessionKeys r0 = session_keys(kToken, Role::rank0, a, b, 1), peer = session_keys(kToken, Role::peer, a, b, 1);
  CHECK(r0.send == peer.recv);
  CHECK(r0.recv == peer.send);
  CHECK(r0.send != r0.recv);
  CHECK(r0.send != session_keys(kToken, Role::rank0, a, fresh_nonce(), 1).send);
  // the hex of the nonces: exactly 64 digits
  unsigned char out[2];
  CHECK(from_hex("0aff", out, 2));
  CHECK(out[1] == 0xff);
  CHECK_FALSE(from_hex("0afg", out, 2));
  CHECK_FALSE(from_hex("0af", out, 2));
  CHECK_FALSE(from_hex("0aff00", out, 2));
  // the token's rules: present (or --insecure), and long enough not to be guessed offline
  CHECK(token_problem(kToken, false) == "");
  CHECK(token_problem("", true) == "");
  CHECK(token_problem("", false).find("export TRAINSIM_TOKEN=$(openssl rand -hex 16)") != std::string::npos);
  CHECK(token_problem("short", true).find("TRAINSIM_TOKEN has 5 characters, fewer than 16") == 0);
  RendezvousOptions none = options(5);
  none.token = "";
  CHECK_THROWS_WITH_AS(rendezvous(env_of(1, 2, free_local_port()), kIdentity, none),
                       doctest::Contains("TRAINSIM_TOKEN is not set"), RendezvousError);
}

TEST_CASE("dist security: lengths a peer claims before proving the token are refused before anything is allocated") {
  LogSink log;
  const int port = free_local_port();
  auto rank0 = start_member(0, 2, port, options(60, &log));
  std::size_t largest = 0;
  {
    AllocationProbe probe;
    RawPeer huge = RawPeer::connect(port);
    REQUIRE(huge.ok());
    huge.send(raw_header(kHello, 0, std::uint64_t{60} << 30));  // ended rank 0 with std::bad_alloc
    CHECK(huge.wait_closed(30));
    std::vector<RawPeer> gib;  // three 1 GiB claims at once: allocated for real before
    for (int i = 0; i < 3; ++i) {
      gib.push_back(RawPeer::connect(port));
      gib.back().send(raw_header(kHello, 0, std::uint64_t{1} << 30));
      gib.back().send(std::string(1000, 'x'));
    }
    for (auto& g : gib) CHECK(g.wait_closed(30));
    RawPeer tag = RawPeer::connect(port);  // the tag's length too
    tag.send(raw_header(kHello, 0xffffffffu, 0));
    CHECK(tag.wait_closed(30));
    largest = probe.largest();
  }
  CHECK(largest < (std::size_t{1} << 20));
  CHECK(member(1, 2, port, options(60)) == "");
  CHECK(rank0.get() == "");
  const std::string out = log.all();
  INFO(out);
  CHECK(log.count("a frame of 64424509440 bytes, above the limit of 4096 bytes before authentication") == 1);
  CHECK(log.count("a frame of 1073741824 bytes, above the limit of 4096 bytes before authentication") == 3);
  CHECK(log.count("a frame of 4294967295 bytes, above the limit") == 1);
  CHECK(log.lines().size() == 5);  // one line per connection, and the job went on
}

TEST_CASE("dist security: malformed hellos are turned away, each logged once in one clean line, the job goes on") {
  LogSink log;
  const int port = free_local_port();
  auto rank0 = start_member(0, 2, port, options(60, &log));
  struct Case {
    std::vector<unsigned char> bytes;
    std::string logged;
  };
  std::vector<unsigned char> flood = raw_frame(kWait, "", "", 9'000'000'000'000);
  for (int i = 0; i < 1000; ++i) {  // a thousand more frames after the first refused one: still one line
    auto f = raw_frame(kHello, "\x1b[2J garbage");
    flood.insert(flood.end(), f.begin(), f.end());
  }
  const std::vector<Case> cases{
      {raw_frame(kHello, R"({"protocol":2,"rank":1,"token":12345,"nonce":7})"), "its hello has no valid nonce"},
      {raw_frame(kHello, R"({"protocol":2,"rank":"one","world_size":"two"})"), "its hello has no valid rank"},
      {raw_frame(kHello, R"({"protocol":1,"rank":1,"world_size":2,"token":"0123456789abcdef0123456789abcdef"})"),
       "it speaks rendezvous protocol 1, rank 0 speaks 2"},
      {raw_frame(kHello, "not json \x1b[31m red \x07\n"), "its hello is not a JSON object"},
      {raw_frame(kHello, R"({"protocol":"\u001b[2J"})"), "its hello has no protocol number"},
      {raw_frame(kHello, R"({"protocol":1e300})"), "its hello has no protocol number"},
      {raw_frame(kHello, R"({"protocol":99999999999999999999})"), "its hello has no protocol number"},
      {raw_frame(kHello, R"([[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]])"),
       "its hello is not a JSON object"},
      {flood, "it sent a frame of kind 3 instead of introducing itself"},
      {raw_frame(kProof, std::string(32, 'p')), "it sent a frame of kind 11 instead of introducing itself"},
      {std::vector<unsigned char>{'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1', '.', '1', '\r', '\n', '\r',
                                  '\n', 0x1b, '[', '2', 'J', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                  0, 0, 0, 0, 0, 0, 0, 0},
       "not a trainsim peer (bad frame header)"},
      {raw_header(kHello, 0, 0, 1), "a frame with a MAC before the handshake"},
  };
  for (const Case& c : cases) {
    RawPeer p = RawPeer::connect(port);
    REQUIRE(p.ok());
    p.send(c.bytes);
    std::string got;
    CHECK_MESSAGE(p.wait_closed(30, &got), c.logged);
    if (c.logged.find("frame") == std::string::npos || c.logged.find("instead") != std::string::npos)
      CHECK_MESSAGE(got.find("rank 0 refused this process: " + c.logged.substr(0, 20)) != std::string::npos, c.logged);
  }
  CHECK(member(1, 2, port, options(60)) == "");
  CHECK(rank0.get() == "");
  const auto lines = log.lines();
  INFO(log.all());
  CHECK(lines.size() == cases.size());
  for (const Case& c : cases)  // once per connection that earned it
    CHECK_MESSAGE(log.count(c.logged) ==
                      std::count_if(cases.begin(), cases.end(), [&](const Case& d) { return d.logged == c.logged; }),
                  c.logged);
  for (const auto& l : lines) {
    CHECK(clean(l));
    CHECK(l.size() < 300);
    CHECK(l.find("rank 0 turned away a connection from 127.0.0.1:") == 0);
  }
}

TEST_CASE("dist security: idle and trickling connections are dropped at the handshake deadline, pending ones are "
          "bounded, and the job completes") {
  LogSink log;
  const int port = free_local_port();
  RendezvousOptions o = options(60, &log);
  o.handshake_seconds = 1.5;
  o.max_pending = 3;
  o.max_logged = 4;
  auto rank0 = start_member(0, 2, port, o);
  RawPeer trickle = RawPeer::connect(port);  // first in the backlog, then six that send nothing
  REQUIRE(trickle.ok());
  auto hello = raw_frame(kHello, R"({"protocol":2,"rank":1,"nonce":"00"})");
  std::atomic<bool> stop{false};
  std::thread slow([&] {  // one byte of its hello every 100 ms: never finishes within the deadline
    for (std::size_t i = 0; i < hello.size() && !stop; ++i) {
      if (!trickle.send(&hello[i], 1)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the trickle itself, not synchronisation
    }
  });
  std::vector<RawPeer> idle;
  for (int i = 0; i < 6; ++i) {
    idle.push_back(RawPeer::connect(port));
    REQUIRE(idle.back().ok());
  }
  // The honest rank connects behind the seven and waits in the listen backlog while they hold the 3 slots:
  // 3 dropped at their deadline (then closed after a second's linger), 3 more, then the last idle one and the
  // honest rank are accepted together; the rendezvous ends, closing the last idle one without counting it.
  const auto t0 = Clock::now();
  CHECK(member(1, 2, port, options(60)) == "");
  const double took = seconds_since(t0);
  stop = true;
  slow.join();
  CHECK(rank0.get() == "");
  CHECK(took >= 1.5);  // it could not be served before the first slots were freed by the deadline
  for (auto& p : idle) CHECK(p.wait_closed(30));
  INFO(log.all());
  CHECK(log.count("it did not prove the job's token and introduce itself within 1.5 s of connecting") == 4);
  CHECK(log.count("rank 0 turned away more connections: from now on it counts them") == 1);
  CHECK(log.count("rank 0 turned away 6 connections in all during the rendezvous") == 1);
  CHECK(log.lines().size() == 6);
}

TEST_CASE("dist security: a rank believes nothing a fake rank 0 says and gives it nothing that depends on the token") {
  RawListener fake;
  REQUIRE(fake.port() > 0);
  auto rank1 = [&](double timeout) { return start_member(1, 2, fake.port(), options(timeout)); };
  // What the rank sent the fake: its hello only, without the token.
  auto check_hello_only = [&](const std::string& got) {
    CHECK(got.find(kToken) == std::string::npos);
    REQUIRE(got.size() >= 48);
    CHECK(static_cast<unsigned char>(got[4]) == kHello);
    const std::size_t data = static_cast<unsigned char>(got[40]) | static_cast<unsigned char>(got[41]) << 8;
    CHECK(got.size() == 48 + data);  // nothing after it: no proof for the fake to try tokens against
    auto h = nlohmann::json::parse(got.substr(48));
    CHECK(h.size() == 3);  // protocol, rank, nonce: not the schedule, model or settings either
    CHECK(h["protocol"] == 2);
  };

  SUBCASE("a wait of 9e12 ms before any proof: the rank ends at once") {
    auto r = rank1(60);
    RawPeer c = fake.accept(30);
    REQUIRE(c.ok());
    auto h = c.read_frame(30);
    REQUIRE(h);
    c.send(raw_frame(kWait, "", "", 9'000'000'000'000));
    std::string got(h->bytes.begin(), h->bytes.end());
    CHECK(c.wait_closed(30, &got));
    check_hello_only(got);
    const std::string e = r.get();
    CHECK(e.find("rank 0 at 127.0.0.1:") == 0);
    CHECK(e.find("sent a frame of kind 3 before proving the job's token: it is not a trainsim rank 0") !=
          std::string::npos);
  }
  SUBCASE("a challenge with a wrong proof: the rank stops without sending its own") {
    auto r = rank1(60);
    RawPeer c = fake.accept(30);
    REQUIRE(c.ok());
    auto h = c.read_frame(30);
    REQUIRE(h);
    c.send(raw_frame(kChallenge, std::string(64, '\x42')));
    std::string got(h->bytes.begin(), h->bytes.end());
    CHECK(c.wait_closed(30, &got));
    check_hello_only(got);
    CHECK(r.get().find("did not prove the job's token: its TRAINSIM_TOKEN differs from rank 1's, or the process on "
                       "that port is not this job's rank 0") != std::string::npos);
  }
  SUBCASE("a refusal with control bytes: reported as unverified, escaped") {
    auto r = rank1(60);
    RawPeer c = fake.accept(30);
    REQUIRE(c.ok());
    REQUIRE(c.read_frame(30));
    c.send(raw_frame(kRefused, "", "\x1b[2J\x1b]0;pwned\x07 go away\n"));
    const std::string e = r.get();
    CHECK(clean(e));
    CHECK(e.find("refused this process before proving the job's token (its words, unverified): "
                 "'\\x1b[2J\\x1b]0;pwned\\x07 go away\\x0a'") != std::string::npos);
  }
  SUBCASE("silence: the rank ends at its own deadline") {
    const auto t0 = Clock::now();
    auto r = rank1(1.5);
    RawPeer c = fake.accept(30);
    REQUIRE(c.ok());
    const std::string e = r.get();
    const double took = seconds_since(t0);
    CHECK(e.find("did not prove the job's token within rank 1's 1.5 s") != std::string::npos);
    CHECK(took >= 1.5);
    CHECK(took < 1.5 + 30);  // (a hang guard, not a timing test)
  }
  SUBCASE("a rank 0 that proves the token and then says wait 9e12 ms: the rank's own deadline bounds it") {
    const auto t0 = Clock::now();
    auto r = rank1(1.5);
    RawPeer c = fake.accept(30);
    REQUIRE(c.ok());
    auto h = c.read_frame(30);
    REQUIRE(h);
    auto hello = nlohmann::json::parse(std::string(h->data.begin(), h->data.end()));
    Nonce theirs, mine = fresh_nonce();
    REQUIRE(from_hex(hello["nonce"].get<std::string>(), theirs.data(), theirs.size()));
    const Proof proof = make_proof(kToken, Role::rank0, theirs, mine, 1);
    std::string challenge(mine.begin(), mine.end());
    challenge.append(proof.begin(), proof.end());
    c.send(raw_frame(kChallenge, challenge));
    MacSender out{session_keys(kToken, Role::rank0, theirs, mine, 1).send};
    exec::Frame wait;
    wait.kind = kWait, wait.count = 9'000'000'000'000;  // "wait 9e12 ms", authenticated
    c.send(out.frame(wait));
    const std::string e = r.get();
    const double took = seconds_since(t0);
    CHECK(e.find("did not finish the rendezvous in time (rank 1 waited 1.5 s for its verdict)") != std::string::npos);
    CHECK(took >= 1.5);
    CHECK(took < 1.5 + 30);  // (a hang guard: before, it waited 9e12 ms)
  }
}

TEST_CASE("dist security: a member's malformed or tampered frames end the job with a message, never a crash") {
  const int port = free_local_port();
  SUBCASE("an introduction with a world size of \"two\"") {
    auto rank0 = start_member(0, 2, port, options(60));
    HostileMember m(port, kToken, 1);
    REQUIRE(m.error == "");
    auto intro = HostileMember::intro(1, 2);
    intro["world_size"] = "two";
    exec::Frame f;
    f.kind = kIntro;
    const std::string text = intro.dump();
    f.data.assign(text.begin(), text.end());
    m.send(f);
    CHECK(rank0.get().find("rank 1 (127.0.0.1:") == 0);
    auto e = m.peer.read_frame(30);  // the job's error reaches the member, authenticated
    REQUIRE(e);
    CHECK(e->kind == kError);
    CHECK(e->mac);
    CHECK(e->tag.find("sent a malformed introduction (a field is missing or of the wrong type)") != std::string::npos);
  }
  SUBCASE("a host name with control bytes and another schedule: quoted clean") {
    auto rank0 = start_member(0, 2, port, options(60));
    HostileMember m(port, kToken, 1);
    REQUIRE(m.error == "");
    auto intro = HostileMember::intro(1, 2);
    intro["host"] = "\x1b[2Jevil\n";
    intro["schedule_hash"] = "\x1b[31m" + std::string(5000, 'A');
    exec::Frame f;
    f.kind = kIntro;
    const std::string text = intro.dump();
    f.data.assign(text.begin(), text.end());
    m.send(f);
    const std::string e = rank0.get();
    CHECK(clean(e));
    CHECK(e.size() < 600);
    CHECK(e.find("host \\x1b[2Jevil\\x0a) replays a different schedule from rank 0 (schedule hash \\x1b[31mAAA") !=
          std::string::npos);
    CHECK(e.find("... (5005 bytes in all) against h)") != std::string::npos);
  }

  // After the rendezvous: rank 0 waits in a gather for the member, which then misbehaves.
  auto rank0_gathers = [&] {
    return std::async(std::launch::async, [port]() -> std::string {
      try {
        auto pg = rendezvous(env_of(0, 2, port), kIdentity, options(60));
        pg->gather("", 60);
        return "the gather completed";
      } catch (const std::exception& e) {
        return e.what();
      }
    });
  };
  auto join_as_member = [&](HostileMember& m) {
    REQUIRE(m.error == "");
    exec::Frame f;
    f.kind = kIntro;
    const std::string text = HostileMember::intro(1, 2).dump();
    f.data.assign(text.begin(), text.end());
    m.send(f);
    for (;;) {  // until the welcome
      auto g = m.peer.read_frame(30);
      REQUIRE(g);
      if (g->kind == kWelcome) break;
    }
  };
  SUBCASE("a header claiming 60 GiB, a few bytes, then the end") {
    auto rank0 = rank0_gathers();
    HostileMember m(port, kToken, 1);
    join_as_member(m);
    std::size_t largest = 0;
    std::string e;
    {
      AllocationProbe probe;
      m.peer.send(raw_header(kGather, 0, std::uint64_t{60} << 30, 1));
      m.peer.send(std::string(1000, 'x'));
      m.peer.close();
      e = rank0.get();
      largest = probe.largest();
    }
    CHECK(e.find("rank 1 (127.0.0.1:") == 0);
    CHECK(e.find("is gone: its connection ended (") != std::string::npos);  // (end of file, or a reset)
    CHECK(largest <= (std::size_t{32} << 20));  // read in chunks: memory follows the bytes that arrive
  }
  SUBCASE("a frame whose MAC is wrong (tampering on the path)") {
    auto rank0 = rank0_gathers();
    HostileMember m(port, kToken, 1);
    join_as_member(m);
    exec::Frame g;
    g.kind = kGather, g.data = {1, 2, 3};
    auto bytes = m.out.frame(g);
    bytes[48] ^= 1;  // one bit of the data
    m.peer.send(bytes);
    const std::string e = rank0.get();
    CHECK(e.find("is gone: its connection ended (a frame whose MAC is wrong (the connection was tampered with))") !=
          std::string::npos);
  }
  SUBCASE("a frame without a MAC (injected on the path)") {
    auto rank0 = rank0_gathers();
    HostileMember m(port, kToken, 1);
    join_as_member(m);
    m.peer.send(raw_frame(kError, "", "injected: stop the job"));
    const std::string e = rank0.get();
    CHECK(e.find("a frame without a MAC on an authenticated connection") != std::string::npos);
    CHECK(e.find("injected") == std::string::npos);
  }
  SUBCASE("a collective's input shorter than its count says") {
    auto rank0 = std::async(std::launch::async, [port]() -> std::string {
      try {
        auto pg = rendezvous(env_of(0, 2, port), kIdentity, options(60));
        exec::TcpHub hub(*pg, {{0, 1}}, 60);
        pg->set_failure_handler([&hub](const std::string& why) { hub.abort(why); });  // as the job runner does
        auto c = hub.communicator(0);
        std::vector<float> x(1000, 1.0f);
        NoStream s;
        c->all_reduce(s, x.data(), x.data(), x.size(), 0);
        return "the all-reduce completed";
      } catch (const std::exception& e) {
        return e.what();
      }
    });
    HostileMember m(port, kToken, 1);
    join_as_member(m);
    exec::Frame in;
    in.kind = exec::Frame::kFirstUserKind + 1;  // the TCP communicator's collective input
    in.dst = 0, in.group = 0, in.seq = 0, in.count = 1000, in.tag = "all-reduce", in.data = {1, 2, 3, 4};
    m.send(in);
    CHECK(rank0.get() == "rank 1 sent 4 bytes for a all-reduce of 1000 elements over group 0, expected 4000");
  }
}

// ---- as trainsim processes: what a user's rank 0 prints, how much memory it takes, how much CPU it spins ----
namespace {

// A 2-rank schedule in a fresh directory, replayed for one step on the tiny model.
struct SmallJob {
  std::filesystem::path dir;
  std::string sched;
  std::string data;  // a small corpus of its own: the default one opens dozens of files at once while loading
  explicit SmallJob(const std::string& name)
      : dir(fresh_dir("dist-security-" + name)), sched((dir / "1f1b.sched").string()), data((dir / "corpus.txt").string()) {
    REQUIRE(run_trainsim("gen 1f1b --stages 2 --microbatches 2 -o " + sched).exit_code == 0);
    std::string text;
    for (int i = 0; text.size() < 100000; ++i) text += fmt::format("line {} of the corpus, bytes are tokens\n", i);
    std::ofstream(data) << text;
  }
  ~SmallJob() {  // the test is over: no process of it may outlive it, nor its files
    end_leftover_processes();
    std::filesystem::remove_all(dir);
  }
  Process rank(int r, int port, int max_open_files = 0) const {
    return spawn_trainsim({"replay", sched, "--data", data, "--model", "tiny", "--blocks", "2", "--steps", "1",
                           "--rendezvous-timeout", "60", "--timeout", "60"},
                          rank_env(r, 2, port), dir / ("rank" + std::to_string(r) + ".log"), max_open_files);
  }
};

// Nanoseconds the process's threads have been running or runnable (on a CPU or waiting for one), from
// /proc/PID/task/*/schedstat; -1 where the kernel does not keep the numbers. A process that spins is runnable
// all the time, however loaded the machine; one that sleeps between attempts is not.
long long busy_ns(pid_t pid) {
  long long sum = 0;
  std::error_code ec;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
    std::istringstream in(slurp(t.path() / "schedstat"));
    long long running = 0, waiting = 0;
    if (!(in >> running >> waiting)) return -1;
    sum += running + waiting;
  }
  return ec ? -1 : sum;
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("dist security: trainsim rank 0 under hostile frames: the job completes, memory stays small, the log is "
          "one clean line per connection") {
  SmallJob job("frames");
  const int port = free_local_port();
  Process r0 = job.rank(0, port);
  std::vector<std::vector<unsigned char>> attacks{
      raw_header(kHello, 0, std::uint64_t{60} << 30),  // ended rank 0 with std::bad_alloc
      raw_header(kHello, 0, std::uint64_t{1} << 30),   // three of these were allocated for real
      raw_header(kHello, 0, std::uint64_t{1} << 30),
      raw_header(kHello, 0, std::uint64_t{1} << 30),
      raw_frame(kHello, R"({"protocol":2,"rank":1,"token":12345})"),  // a JSON type error ended rank 0
      raw_frame(kHello, R"({"protocol":2,"rank":1,"world_size":"two"})"),
      raw_frame(kHello, "\x1b[2J\x1b]0;owned\x07\r\n"),
  };
  std::vector<RawPeer> peers;
  for (const auto& bytes : attacks) {
    peers.push_back(RawPeer::connect(port));
    REQUIRE(peers.back().ok());
    peers.back().send(bytes);
    if (bytes.size() == 48) peers.back().send(std::string(4096, 'x'));  // some of the claimed body
  }
  for (auto& p : peers) CHECK(p.wait_closed(60));
  Process r1 = job.rank(1, port);
  CHECK(wait_all({&r0, &r1}, std::chrono::seconds(120)));
  const std::string out0 = r0.output();
  INFO(out0);
  CHECK(r0.exit_code == 0);
  CHECK(r1.exit_code == 0);
  CHECK(count_of(out0, "trainsim replay: rank 0 turned away a connection from 127.0.0.1:") ==
        static_cast<int>(attacks.size()));
  CHECK(count_of(out0, "above the limit of 4096 bytes before authentication") == 4);
  CHECK(count_of(out0, "its hello has no valid nonce") == 2);
  CHECK(count_of(out0, "its hello is not a JSON object") == 1);
  CHECK(std::all_of(out0.begin(), out0.end(), [](char c) { return c == '\n' || (c >= 0x20 && c <= 0x7e); }));
  CHECK(r0.max_rss_kib > 0);
  CHECK(r0.max_rss_kib < 512 * 1024);  // (three 1 GiB buffers before)
}

TEST_CASE("dist security: trainsim rank 0 out of file descriptors pauses its accepts instead of spinning, and the "
          "job completes once they are free") {
  SmallJob job("descriptors");
  const int port = free_local_port();
  Process r0 = job.rank(0, port, 32);  // (the replay itself holds about 5 at the rendezvous)
  // Twice as many connections as it has descriptors, saying nothing: it accepts until it holds all 32, and
  // the rest wait in the listen backlog, where each accept() fails with EMFILE.
  std::vector<RawPeer> idle;
  for (int i = 0; i < 64; ++i) {
    idle.push_back(RawPeer::connect(port, 60));
    REQUIRE(idle.back().ok());
  }
  auto open_files = [&] {  // descriptors 0..31 in use: then none is left for an accept()
    std::error_code ec;
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(r0.pid) + "/fd", ec))
      n += std::atoi(e.path().filename().c_str()) < 32;
    return n;
  };
  for (int w = 0; w < 1500 && open_files() < 32; ++w)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // (polling its descriptors, at most 30 s)
  REQUIRE(open_files() == 32);
  // While the backlog waits, rank 0 is runnable only now and then.
  const long long before = busy_ns(r0.pid);
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the window measured, not synchronisation
  const long long after = busy_ns(r0.pid);
  const double wall_ns = seconds_since(t0) * 1e9;
  if (before >= 0 && after >= 0) {
    INFO("rank 0 was runnable for ", (after - before) / 1e6, " ms of ", wall_ns / 1e6, " ms");
    CHECK(static_cast<double>(after - before) < 0.5 * wall_ns);  // a spinning accept loop: about 100%
  } else {
    MESSAGE("this kernel keeps no /proc/PID/task/*/schedstat: the CPU check is skipped");
  }
  idle.clear();  // the descriptors come free; the honest rank joins
  Process r1 = job.rank(1, port);
  CHECK(wait_all({&r0, &r1}, std::chrono::seconds(120)));
  const std::string out0 = r0.output();
  INFO(out0);
  CHECK(r0.exit_code == 0);
  CHECK(r1.exit_code == 0);
  CHECK(count_of(out0, "rank 0 cannot accept a connection (Too many open files): it pauses and tries again") >= 1);
  CHECK(count_of(out0, "cannot accept a connection") <= 3);  // once per episode, not once per attempt
}
