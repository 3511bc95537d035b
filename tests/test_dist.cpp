// One process per rank (exec/dist/, exec/cpu/tcp_comm.h, trainsim launch), on 127.0.0.1 only: the rank
// variables; the TCP communicator gives ThreadHub's bits; N local processes meet and agree; a wrong token is
// turned away while the job goes on; a duplicate rank, a wrong world size, a different schedule, a missing
// rank and a rank killed mid-step each end every process with an error naming it, within the deadline; and
// `trainsim launch --nproc 4 -- trainsim replay` gives the threaded replay's losses and weights bit for bit.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint_helpers.h"
#include "exec/cpu/cpu_device.h"
#include "exec/cpu/tcp_comm.h"
#include "exec/cpu/thread_comm.h"
#include "exec/dist/env.h"
#include "exec/dist/rendezvous.h"
#include "hostile_peer.h"
#include "process_helpers.h"

using namespace trainsim;
using namespace trainsim::testing;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

exec::dist::EnvLookup lookup(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string env_error(std::map<std::string, std::string> vars) {
  try {
    exec::dist::read_rank_env(lookup(std::move(vars)));
  } catch (const exec::dist::RankEnvError& e) {
    return e.what();
  }
  return "";
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A 4-rank 1F1B schedule (4 layers) in `dir`, and the arguments replaying it on the tiny model.
struct Job {
  fs::path dir;
  std::string sched;
  // Generous: on success paths no deadline is tested, and none may expire while a loaded machine starts the
  // processes one by one.
  std::string rendezvous_timeout = "60";
  Job(const std::string& name) : dir(fresh_dir("dist-" + name)), sched((dir / "1f1b.sched").string()) {
    REQUIRE(run_trainsim("gen 1f1b --stages 4 --microbatches 8 -o " + sched).exit_code == 0);
  }
  ~Job() {  // the test is over: no process of it may outlive it, nor its files
    end_leftover_processes();
    fs::remove_all(dir);
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  std::vector<std::string> replay(std::vector<std::string> extra = {}) const {
    std::vector<std::string> a{"replay", sched, "--model", "tiny", "--blocks", "4", "--steps", "2",
                               "--rendezvous-timeout", rendezvous_timeout, "--timeout", "20"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  Process rank(int r, int world, int port, const std::vector<std::string>& extra = {}, const std::string& token = kTestToken,
               const std::string& name = "") const {
    return spawn_trainsim(replay(extra), rank_env(r, world, port, token), dir / ("rank" + std::to_string(r) + name + ".log"));
  }
};

}  // namespace

TEST_CASE("dist env: torchrun, Slurm and Open MPI variables, and clear errors") {
  auto t = exec::dist::read_rank_env(lookup({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"},
                                             {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29500"}}));
  REQUIRE(t);
  CHECK(t->source == "torchrun");
  CHECK(t->rank == 2);
  CHECK(t->world_size == 4);
  CHECK(t->local_rank == 0);
  CHECK(t->master_addr == "node7");
  CHECK(t->master_port == 29500);

  auto s = exec::dist::read_rank_env(lookup({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}}),
                                     {"head", 1234});
  REQUIRE(s);
  CHECK(s->source == "slurm");
  CHECK(s->rank == 5);
  CHECK(s->local_rank == 1);
  CHECK(s->master_addr == "head");
  CHECK(s->master_port == 1234);

  auto m = exec::dist::read_rank_env(lookup({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "9"},
                                             {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}));
  REQUIRE(m);
  CHECK(m->source == "openmpi");  // mpirun inside a Slurm allocation: its own variables count
  auto tr = exec::dist::read_rank_env(lookup({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"},
                                              {"MASTER_PORT", "9"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}));
  REQUIRE(tr);
  CHECK(tr->source == "torchrun");  // torchrun started by srun
  CHECK_FALSE(exec::dist::read_rank_env(lookup({{"HOME", "/root"}})));

  CHECK(env_error({{"RANK", "1"}}) == "RANK is set but WORLD_SIZE is not: set both (torchrun variables)");
  CHECK(env_error({{"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}}).find("WORLD_SIZE is set but RANK is not") == 0);
  CHECK(env_error({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}) ==
        "RANK=4 but WORLD_SIZE=4: ranks run from 0 to 3");
  CHECK(env_error({{"RANK", "x"}, {"WORLD_SIZE", "4"}}) == "RANK='x' is not a whole number");
  CHECK(env_error({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "70000"}}) ==
        "MASTER_PORT=70000 is out of range (1 to 65535)");
  CHECK(env_error({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}}) ==
        "SLURM_PROCID and SLURM_NTASKS are set but not where rank 0 listens: set MASTER_ADDR (or --master-addr)");
  CHECK(env_error({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "a"}}).find("set MASTER_PORT") != std::string::npos);
  CHECK(env_error({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}})
            .find("LOCAL_RANK=2 is above RANK=1") == 0);
  CHECK(env_error({{"RANK", "0"}, {"WORLD_SIZE", "1"}}) == "");  // one process: no rendezvous, no address needed
}

TEST_CASE("dist: the TCP communicator gives ThreadHub's results bit for bit (ranks as threads on 127.0.0.1)") {
  const int world = 3;
  const std::vector<std::vector<int>> groups{{0, 1, 2}, {2, 0}};
  // Random inputs whose sums round differently in another order.
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0, 1e3f);
  std::vector<std::vector<float>> in(world, std::vector<float>(3 * 50));
  for (auto& v : in)
    for (float& x : v) x = nd(gen) * std::exp2(static_cast<float>(gen() % 20) - 10);

  struct Out {
    std::vector<float> gathered, scattered, reduced, pair, broadcast, rooted_sum;
    std::vector<double> reduced64;
    std::vector<float> received;
    std::vector<float> a2a, a2a_default;  // the all-to-all, native and the base class's two all-gathers
  };
  // All-to-all: member r sends (r+1)·(j+1) floats to member j of group 0 ({0, 1, 2}: member = rank).
  auto a2a_counts = [](int r, bool send) {
    std::vector<std::size_t> c(world);
    for (int j = 0; j < world; ++j) c[j] = send ? (r + 1) * (j + 1) : (j + 1) * (r + 1);
    return c;
  };
  auto body = [&](int r, exec::Communicator& c, exec::StreamContext& s, Out& o) {
    o.a2a.resize(6 * (r + 1)), o.a2a_default.resize(6 * (r + 1));
    c.all_to_all(s, in[r].data(), a2a_counts(r, true), o.a2a.data(), a2a_counts(r, false), 0);
    c.exec::Communicator::all_to_all(s, in[r].data(), a2a_counts(r, true), o.a2a_default.data(), a2a_counts(r, false), 0);
    o.gathered.resize(3 * 50);
    c.all_gather(s, in[r].data(), o.gathered.data(), 50, 0);
    o.scattered.resize(50);
    c.reduce_scatter(s, in[r].data(), o.scattered.data(), 50, 0);
    o.reduced = in[r];
    c.all_reduce(s, o.reduced.data(), o.reduced.data(), o.reduced.size(), 0);
    std::vector<double> d(in[r].begin(), in[r].end());
    o.reduced64.resize(d.size());
    c.all_reduce(s, d.data(), o.reduced64.data(), d.size(), 0);
    if (r != 1) {
      o.pair.resize(2 * 10);
      c.all_gather(s, in[r].data() + 7, o.pair.data(), 10, 1);
    }
    o.broadcast.assign(50, 0.0f);  // rank 1's first 50 inputs, in place on the root
    if (r == 1) std::copy(in[r].begin(), in[r].begin() + 50, o.broadcast.begin());
    c.broadcast(s, r == 1 ? o.broadcast.data() : nullptr, o.broadcast.data(), 50, 1, 0);
    if (r != 1) {  // group 1 is {2, 0}: the sum to rank 2 only
      o.rooted_sum.assign(50, 0.0f);
      c.reduce(s, in[r].data(), r == 2 ? o.rooted_sum.data() : nullptr, 50, 2, 1);
    }
    if (r == 2) c.send(s, in[r].data(), 40, 0, "msg");
    if (r == 0) {
      o.received.resize(10);
      c.recv(s, o.received.data(), 40, 2, "msg");
    }
    c.barrier(s, 0);
  };
  auto on_rank = [&](int r, exec::Communicator& c, Out& o) {
    exec::CpuDevice dev(Clock::now());
    dev.submit(0, {}, [&](exec::StreamContext& s) { body(r, c, s, o); }, 0);
    dev.synchronize();
  };

  std::vector<Out> threaded(world), tcp(world);
  {
    exec::ThreadHub hub(world, groups, 30);
    std::vector<std::thread> ts;
    for (int r = 0; r < world; ++r)
      ts.emplace_back([&, r] {
        auto c = hub.communicator(r);
        on_rank(r, *c, threaded[r]);
      });
    for (auto& t : ts) t.join();
  }
  {
    const int port = free_local_port();
    std::vector<std::string> errors(world);
    std::vector<std::thread> ts;
    for (int r = 0; r < world; ++r)
      ts.emplace_back([&, r] {
        try {
          exec::dist::RankEnv env{"torchrun", r, world, r, "127.0.0.1", port};
          exec::dist::RendezvousOptions ro;
          ro.timeout_seconds = 20;
          ro.token = kTestToken;
          auto pg = exec::dist::rendezvous(env, {"h", "m", "s"}, ro);
          {
            exec::TcpHub hub(*pg, groups, 30);
            auto c = hub.communicator(r);
            on_rank(r, *c, tcp[r]);
            pg->broadcast("", 30);  // everyone is done with the communicator
          }
          pg->close();
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < world; ++r) CHECK_MESSAGE(errors[r] == "", "rank ", r);
  }
  auto same_bits = [](const auto& a, const auto& b) {
    // (memcmp is given no null pointer: an empty vector's data() may be one)
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
  };
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    CHECK(same_bits(tcp[r].gathered, threaded[r].gathered));
    CHECK(same_bits(tcp[r].scattered, threaded[r].scattered));
    CHECK(same_bits(tcp[r].reduced, threaded[r].reduced));
    CHECK(same_bits(tcp[r].reduced64, threaded[r].reduced64));
    CHECK(same_bits(tcp[r].pair, threaded[r].pair));
    CHECK(same_bits(tcp[r].received, threaded[r].received));
    CHECK(same_bits(tcp[r].broadcast, threaded[r].broadcast));
    CHECK(same_bits(tcp[r].rooted_sum, threaded[r].rooted_sum));
    CHECK(same_bits(threaded[r].broadcast, std::vector<float>(in[1].begin(), in[1].begin() + 50)));
    // the all-to-all: member i's block for r, in member order (written out here)
    std::vector<float> expected;
    for (int i = 0; i < world; ++i) {
      std::size_t offset = 0;
      for (int j = 0; j < r; ++j) offset += (i + 1) * (j + 1);
      expected.insert(expected.end(), in[i].begin() + offset, in[i].begin() + offset + (i + 1) * (r + 1));
    }
    CHECK(same_bits(threaded[r].a2a, expected));
    CHECK(same_bits(tcp[r].a2a, expected));
    CHECK(same_bits(threaded[r].a2a_default, expected));
    CHECK(same_bits(tcp[r].a2a_default, expected));
  }
  // the sum is not trivially order-independent here: member order matters in the last bits
  std::vector<float> reversed(in[0].size());
  for (std::size_t e = 0; e < reversed.size(); ++e) reversed[e] = (in[2][e] + in[1][e]) + in[0][e];
  CHECK_FALSE(same_bits(reversed, threaded[0].reduced));
  std::vector<float> rooted(50);
  for (std::size_t e = 0; e < rooted.size(); ++e) rooted[e] = in[2][e] + in[0][e];  // member order: 2, then 0
  CHECK(same_bits(rooted, threaded[2].rooted_sum));
  CHECK(same_bits(std::vector<float>(50, 0.0f), threaded[0].rooted_sum));  // not the root: untouched
}

TEST_CASE("dist: ranks that meet agree and train, a rank with another token is turned away and the job goes on") {
  Job job("token");
  const int port = free_local_port();
  Process r0 = job.rank(0, 4, port);
  Process impostor = job.rank(1, 4, port, {}, "another-token-0123456789abcdef", "-impostor");
  Process tokenless = job.rank(2, 4, port, {"--insecure"}, "", "-tokenless");
  CHECK(wait_all({&impostor, &tokenless}, std::chrono::seconds(60)));
  const std::string rank0_at = fmt::format("rank 0 at 127.0.0.1:{} did not prove the job's token: its TRAINSIM_TOKEN "
                                           "differs from rank ",
                                           port);
  CHECK(impostor.exit_code == 1);
  CHECK(impostor.output().find(rank0_at + "1's") != std::string::npos);
  CHECK(tokenless.exit_code == 1);
  CHECK(tokenless.output().find(rank0_at + "2's") != std::string::npos);
  // the right ones now
  Process r1 = job.rank(1, 4, port), r2 = job.rank(2, 4, port), r3 = job.rank(3, 4, port);
  CHECK(wait_all({&r0, &r1, &r2, &r3}, std::chrono::seconds(90)));
  const std::string out0 = r0.output();
  INFO(out0);
  CHECK(r0.exit_code == 0);
  CHECK(r1.exit_code == 0);
  CHECK(r2.exit_code == 0);
  CHECK(r3.exit_code == 0);
  // rank 0 logs each once: they stopped at its proof, having revealed nothing
  for (int r : {1, 2})
    CHECK(out0.find(fmt::format("(it claims rank {}): its connection ended (", r)) != std::string::npos);
  CHECK(out0.find("before it proved the job's token (a rank whose TRAINSIM_TOKEN differs from rank 0's stops here)") !=
        std::string::npos);
  CHECK(out0.find("step     2/2  loss") != std::string::npos);
  CHECK(r1.output() == "");  // rank 0 reports
}

TEST_CASE("trainsim replay: one process per rank needs TRAINSIM_TOKEN (or --insecure), and not a short one") {
  Job job("no-token");
  const int port = free_local_port();
  Process none = spawn_trainsim(job.replay(), rank_env(0, 4, port, ""), job.dir / "none.log");
  Process short_token = spawn_trainsim(job.replay(), rank_env(1, 4, port, "abc"), job.dir / "short.log");
  CHECK(wait_all({&none, &short_token}, std::chrono::seconds(30)));
  CHECK(none.exit_code == 2);  // at once, before any work and before opening the port
  CHECK(none.output() ==
        "trainsim replay: TRAINSIM_TOKEN is not set: a job of several processes needs a shared secret, or any process "
        "that reaches rank 0's port can join it; set the same secret for every rank before starting them, e.g. "
        "`export TRAINSIM_TOKEN=$(openssl rand -hex 16)` before srun or torchrun on every node (`trainsim launch` sets "
        "one itself) (or pass --insecure to accept any process)\n");
  CHECK(short_token.exit_code == 2);
  CHECK(short_token.output().find("trainsim replay: TRAINSIM_TOKEN has 3 characters, fewer than 16: a short token can "
                                  "be guessed offline") == 0);
  // --insecure: the job runs, and rank 0 says who may join it
  std::vector<Process> ps;
  for (int r = 0; r < 4; ++r)
    ps.push_back(spawn_trainsim(job.replay({"--insecure"}), rank_env(r, 4, port, ""),
                                job.dir / ("insecure" + std::to_string(r) + ".log")));
  std::vector<Process*> ptrs;
  for (auto& p : ps) ptrs.push_back(&p);
  CHECK(wait_all(ptrs, std::chrono::seconds(90)));
  const std::string out0 = ps[0].output();
  INFO(out0);
  for (auto& p : ps) CHECK(p.exit_code == 0);
  CHECK(out0.find(fmt::format("trainsim replay: --insecure and no TRAINSIM_TOKEN: any process that reaches "
                              "127.0.0.1:{} may join this job",
                              port)) != std::string::npos);
}

TEST_CASE("dist: a duplicate rank, a wrong world size, a different schedule or model end every rank, naming it") {
  Job job("checks");
  // (Every rank waits long: no deadline is part of what is tested, rank 0 fails the job as soon as the odd rank
  // introduces itself.)
  struct Case {
    std::string name;
    std::vector<int> ranks;
    std::map<int, std::vector<std::string>> extra;
    std::map<int, int> worlds;
    std::string error;
  };
  fs::path gpipe = job.dir / "gpipe.sched";
  REQUIRE(run_trainsim("gen gpipe --stages 4 --microbatches 8 -o " + gpipe.string()).exit_code == 0);
  // the odd process is the last in `ranks`
  std::vector<Case> cases{
      {"duplicate", {0, 1, 2, 2}, {}, {}, "two processes claim rank 2: 127.0.0.1:"},
      {"world size", {0, 1, 3, 2}, {}, {{3, 3}}, "rank 2 (127.0.0.1:"},
      {"schedule", {0, 1, 2, 3}, {{3, {"--schedule-file-for-test"}}}, {}, "replays a different schedule from rank 0"},
      {"model", {0, 2, 3, 1}, {{3, {"--dim", "64"}}}, {}, "has a different model from rank 0's: dim 64 against 32"},
  };
  for (Case& c : cases) {
    SUBCASE(c.name.c_str()) {
      std::vector<Process> ps;
      const int port = free_local_port();
      auto spawn = [&](std::size_t i) {
        const int r = c.ranks[i];
        const int w = c.worlds.count(static_cast<int>(i)) ? c.worlds.at(static_cast<int>(i)) : 4;
        std::vector<std::string> args = job.replay();
        if (c.extra.count(static_cast<int>(i))) {
          auto e = c.extra.at(static_cast<int>(i));
          if (e[0] == "--schedule-file-for-test") args[1] = gpipe.string();  // the schedule case replaces rank 3's file
          else args.insert(args.end(), e.begin(), e.end());
        }
        ps.push_back(spawn_trainsim(args, rank_env(r, w, port), job.dir / (c.name + std::to_string(i) + ".log")));
      };
      // The odd one starts once the others have connected to rank 0: then every process is there when rank 0
      // sees it, whatever the load, and none waits for its deadline.
      for (std::size_t i = 0; i + 1 < c.ranks.size(); ++i) spawn(i);
      CHECK(wait_established(port, static_cast<int>(c.ranks.size()) - 2, std::chrono::seconds(60)));
      spawn(c.ranks.size() - 1);
      std::vector<Process*> ptrs;
      for (auto& p : ps) ptrs.push_back(&p);
      CHECK(wait_all(ptrs, std::chrono::seconds(90)));  // (a hang guard: each ends as soon as rank 0 fails)
      const std::string out0 = ps[0].output();
      INFO(out0);
      CHECK(ps[0].exit_code == 1);
      CHECK(out0.find(c.error) != std::string::npos);
      if (c.name == "world size") CHECK(out0.find("says the world has 3 ranks, rank 0 says 4") != std::string::npos);
      // every process ends with rank 0's error
      for (auto& p : ps) {
        CHECK(p.exit_code == 1);
        CHECK(p.output().find(c.error) != std::string::npos);
      }
    }
  }
}

TEST_CASE("dist: a rank missing at the deadline ends the others, naming it") {
  Job job("missing");
  job.rendezvous_timeout = "60";  // ranks 1 and 2; rank 0's deadline, 2 s, is the one tested
  // Ranks 1 and 2 first, until they knock on the port (a listener of the test's, which then closes: they try
  // again), then rank 0: they join it within a tenth of a second of its start, long before its deadline.
  const int port = free_local_port();
  std::vector<Process> ps(3);
  {
    RawListener knock(port);
    REQUIRE(knock.port() == port);
    ps[1] = job.rank(1, 4, port), ps[2] = job.rank(2, 4, port);
    RawPeer a = knock.accept(60), b = knock.accept(60);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
  }
  auto t0 = Clock::now();
  job.rendezvous_timeout = "2";
  ps[0] = job.rank(0, 4, port);
  CHECK(wait_all({&ps[0], &ps[1], &ps[2]}, std::chrono::seconds(90)));
  CHECK(seconds_since(t0) >= 2);  // not before rank 0's deadline (the upper bound would be process start-up's)
  for (auto& p : ps) {
    const std::string out = p.output();
    INFO(out);
    CHECK(p.exit_code == 1);
    CHECK(out.find("the rendezvous timed out after 2 s: rank(s) 3 did not join (3 of 4 ranks reached rank 0 at "
                   "127.0.0.1:") != std::string::npos);
  }
}

TEST_CASE("trainsim launch: a rank killed mid-step ends the others with an error naming it") {
  Job job("killed");
  std::string args;
  for (const auto& a : job.replay({"--test-kill-at", "2:5"})) args += " " + a;
  // The tests' copy of trainsim (the user's has no --test-kill-at); launch runs its own binary for `trainsim`.
  CommandResult r = run_shell(std::string(TRAINSIM_FAULT_TEST_BINARY) + " launch --nproc 4 --grace 120 -- trainsim" +
                              args + " 2>&1");
  INFO(r.out);
  // The others stop on their own: the launcher never had to stop them when its grace ran out (a bound that
  // holds on a loaded machine: they hear of the death when its connection ends, not after a timeout).
  CHECK(r.out.find("the grace of") == std::string::npos);
  CHECK(r.exit_code == 128 + SIGKILL);  // the first failure's code
  CHECK(r.out.find("trainsim launch: rank 2 was killed by signal 9") != std::string::npos);
  for (int q : {0, 1, 3})
    CHECK(r.out.find(fmt::format("[rank {}] trainsim replay: {}rank 2 (127.0.0.1:", q,
                                 q == 0 ? "" : fmt::format("rank {}: ", q))) != std::string::npos);
  // (end of file, or a reset where the killed process left data unread)
  CHECK(r.out.find("is gone: its connection ended (") != std::string::npos);
  CHECK(r.out.find("in the middle of the job; its process died or was killed") != std::string::npos);
}

TEST_CASE("trainsim launch: 4 processes replay a 1F1B schedule with the threaded replay's losses and weights, bit for bit") {
  Job job("equal");
  fs::path threaded = job.dir / "threaded", launched = job.dir / "launched";
  CommandResult a = run_trainsim("replay " + job.sched + " --model tiny --blocks 4 --steps 3 --json --save " +
                                 threaded.string());
  REQUIRE(a.exit_code == 0);
  CommandResult b = run_trainsim("launch --nproc 4 -- trainsim replay " + job.sched +
                                 " --model tiny --blocks 4 --steps 3 --json --rendezvous-timeout 30 --save " +
                                 launched.string());
  INFO(b.out);
  REQUIRE(b.exit_code == 0);
  // rank 0 prints the result; every line carries its rank
  std::string json;
  std::istringstream lines(b.out);
  for (std::string line; std::getline(lines, line);) {
    REQUIRE(line.rfind("[rank 0] ", 0) == 0);
    json += line.substr(9) + "\n";
  }
  auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(json);
  CHECK(jb["ok"] == true);
  REQUIRE(jb["losses"].size() == 3);
  for (int i = 0; i < 3; ++i) {
    double x = ja["losses"][i], y = jb["losses"][i];
    CHECK(std::memcmp(&x, &y, sizeof x) == 0);
  }
  CHECK(jb["peak_bytes"].size() == 4);
  for (int r = 0; r < 4; ++r) {
    const fs::path f = checkpoint_rank_file(launched, r);
    CHECK_MESSAGE(slurp(checkpoint_rank_file(threaded, r)) == slurp(f), f);
    CHECK(!slurp(f).empty());
  }
}

TEST_CASE("trainsim replay: partial rank variables are a clear error") {
  CommandResult r = run_trainsim("replay ddp --model tiny --steps 1", true);  // baseline: threads
  REQUIRE(r.exit_code == 0);
  Job job("env");
  Process p = spawn_trainsim(job.replay(), {{"RANK", "1"}}, job.dir / "partial.log");
  CHECK(wait_all({&p}, std::chrono::seconds(30)));
  CHECK(p.exit_code == 2);
  CHECK(p.output() == "trainsim replay: RANK is set but WORLD_SIZE is not: set both (torchrun variables)\n");
}

TEST_CASE("examples: the multi-machine scripts parse, and the torchrun-style one stops at once without a token") {
  const std::string dir = std::string(TRAINSIM_SOURCE_DIR) + "/examples/";
  CHECK(run_shell("bash -n " + dir + "replay-slurm.sbatch 2>&1").exit_code == 0);
  CHECK(run_shell("bash -n " + dir + "replay-torchrun-multinode.sh 2>&1").exit_code == 0);
  CommandResult r = run_shell("env -u TRAINSIM_TOKEN NODE_RANK=0 MASTER_ADDR=127.0.0.1 bash " + dir +
                              "replay-torchrun-multinode.sh 2>&1");
  CHECK(r.exit_code != 0);
  CHECK(r.out.find("TRAINSIM_TOKEN: set TRAINSIM_TOKEN to the same secret on every machine") != std::string::npos);
}

TEST_CASE("trainsim launch: MoE beside TP over 4 processes passes --check (the shards' routing digests sent to rank 0)") {
  // Each TP rank routes its sequence shard of a microbatch; rank 0 sums the shards' routing digests it receives
  // (exec/job_wire.h) before comparing them with single-device training's, so a lost or misread shard would show.
  // With expert TP (--etp 2) the TP group also all-gathers its members' tokens, of unequal counts, over TCP; without
  // EP every TP rank routes every token and runs its slice of every expert. Two of them with the load-balancing
  // loss, whose sums the ranks send rank 0 too (a shard's part, or a TP slice's whole once).
  for (const auto& [gen, aux] : {std::pair{"gen 3d --tp 2 --sp --dp 2 --ep 4 --layers 2 --microbatches 2", true},
                                 {"gen 3d --tp 2 --sp --dp 2 --ep 2 --etp 2 --layers 2 --microbatches 2", false},
                                 {"gen 3d --tp 2 --sp --dp 2 --layers 2 --microbatches 2", true}}) {
    CAPTURE(gen);
    Job job("moe-tp");
    const std::string sched = (job.dir / "moetp.sched").string();
    REQUIRE(run_trainsim(std::string(gen) + " -o " + sched).exit_code == 0);
    CommandResult r = run_trainsim("launch --nproc 4 -- trainsim replay " + sched +
                                   " --model tiny-moe --steps 3 --check --json --rendezvous-timeout 60" +
                                   (aux ? " --aux-loss-coeff 0.05" : ""));
    INFO(r.out);
    REQUIRE(r.exit_code == 0);
    std::string json;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("[rank 0] ", 0) == 0) json += line.substr(9) + "\n";
    const auto j = nlohmann::json::parse(json);
    CHECK(j["ok"] == true);
    CHECK_FALSE(j.contains("routing_diverged_step"));  // (written only where the routing differs)
    CHECK(j["max_rel_diff_loss"].get<double>() <= 1e-5);
    CHECK(j["max_rel_diff_weights"].get<double>() <= 1e-5);
    CHECK(j["replicas_identical"] == true);
    CHECK(j.contains("aux_losses") == aux);
    if (aux)
      for (std::size_t i = 0; i < 3; ++i)
        CHECK(j["aux_losses"][i].get<double>() == doctest::Approx(j["reference_aux_losses"][i].get<double>()).epsilon(1e-5));
  }
}
