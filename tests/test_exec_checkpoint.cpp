// Checkpoints of a replay: saving at step k and resuming gives the same losses and weights as running
// straight through, bit for bit; a checkpoint of another schedule, model, seed, run length or corpus, or a
// corrupt one, is refused with a clear error. A save that fails leaves the checkpoint before it intact; a
// manifest or rank file that was edited, forged, truncated or replaced by something that is not a file is
// refused naming the file and what is wrong, without hanging or reading without bound.
#include <doctest/doctest.h>

#include <limits>

#include <csignal>
#include <filesystem>
#include <fstream>

#include <sys/resource.h>
#include <sys/stat.h>

#include "checkpoint_helpers.h"
#include "cli_helpers.h"
#include "exec/checkpoint.h"
#include "exec/file_io.h"
#include "exec/sha256.h"
#include "exec_helpers.h"
#include "schedules/generators.h"
#include "schedules/text_format.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {
// doctest::Contains of a std::string (it takes a C string or doctest::String; it keeps a copy).
doctest::Contains contains(const std::string& text) { return doctest::Contains(text.c_str()); }
}  // namespace

namespace {

Schedule fsdp2() {
  GenOptions g;
  g.dp = 2, g.layers = 2, g.microbatches = 2;
  return generate("fsdp", g);
}

}  // namespace

TEST_CASE("exec checkpoint: save at step 3, resume, and the run is the same bit for bit") {
  for (const char* kind : {"fsdp", "1f1b", "zero1"}) {
    INFO(kind);
    GenOptions g;
    g.dp = 2, g.layers = 2, g.microbatches = 2, g.stages = 2;
    Schedule s = generate(kind, g);
    ScopedDir scoped(std::string("ckpt-") + kind);
    const auto& dir = scoped.path;
    exec::ReplayOptions straight = tiny_options(s, 6);
    straight.save_dir = (dir / "straight").string();
    exec::ReplayResult a = exec::replay(s, straight);
    REQUIRE(a.ok);

    exec::ReplayOptions first = tiny_options(s, 6);
    first.stop_after = 3;
    first.save_dir = (dir / "half").string();
    exec::ReplayResult b = exec::replay(s, first);
    REQUIRE(b.ok);
    REQUIRE(b.losses.size() == 3);

    exec::ReplayOptions rest = tiny_options(s, 6);
    rest.resume_dir = (dir / "half").string();
    rest.save_dir = (dir / "resumed").string();
    exec::ReplayResult c = exec::replay(s, rest);
    INFO(c.error);
    REQUIRE(c.ok);
    CHECK(c.first_step == 3);
    REQUIRE(c.losses.size() == 3);
    for (int i = 0; i < 3; ++i) {
      CHECK(b.losses[i] == a.losses[i]);
      CHECK(c.losses[i] == a.losses[i + 3]);  // exactly: the same arithmetic in the same order
    }
    for (int r = 0; r < s.header.world_size; ++r) {
      std::string x = slurp(checkpoint_rank_file(dir / "straight", r)), y = slurp(checkpoint_rank_file(dir / "resumed", r));
      CHECK(!x.empty());
      CHECK(x == y);
    }
    CHECK(slurp(dir / "straight" / "manifest.json") == slurp(dir / "resumed" / "manifest.json"));
  }
}

TEST_CASE("exec checkpoint: resuming with the wrong run is refused, naming what differs") {
  Schedule s = fsdp2();
  ScopedDir scoped("ckpt-foreign");
  const auto& dir = scoped.path;
  exec::ReplayOptions o = tiny_options(s, 4);
  o.stop_after = 2;
  o.save_dir = (dir / "c").string();
  REQUIRE(exec::replay(s, o).ok);

  auto resume = [&](const Schedule& sched, exec::ReplayOptions opt) {
    opt.resume_dir = (dir / "c").string();
    exec::ReplayResult r = exec::replay(sched, opt);
    CHECK_FALSE(r.ok);
    return r.error;
  };
  GenOptions g;
  g.dp = 2, g.layers = 2, g.microbatches = 3;
  Schedule other = generate("fsdp", g);
  CHECK(resume(other, tiny_options(other, 4)).find("another schedule") != std::string::npos);
  exec::ReplayOptions m = tiny_options(s, 4);
  m.model.dim = 16;
  CHECK(resume(s, m).find("another model") != std::string::npos);
  exec::ReplayOptions seed = tiny_options(s, 4);
  seed.seed = 99;
  CHECK(resume(s, seed).find("seed 1, not 99") != std::string::npos);
  CHECK(resume(s, tiny_options(s, 8)).find("pass --steps 4") != std::string::npos);
  exec::ReplayOptions lr = tiny_options(s, 4);
  lr.optimizer.lr = 5e-3f;
  CHECK(resume(s, lr).find("optimizer settings") != std::string::npos);

  // a damaged rank file is caught by its hash
  const std::string rank1 = checkpoint_rank_file(dir / "c", 1).filename().string();
  {
    std::fstream f(dir / "c" / rank1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  CHECK(resume(s, tiny_options(s, 4)).find("corrupt") != std::string::npos);
  CHECK(resume(s, tiny_options(s, 4)).find(rank1) != std::string::npos);
  exec::ReplayOptions missing = tiny_options(s, 4);
  missing.resume_dir = (dir / "nowhere").string();
  exec::ReplayResult r = exec::replay(s, missing);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("manifest.json") != std::string::npos);
}

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The regular files of `dir`, name -> bytes: what "the checkpoint is unchanged" compares.
std::map<std::string, std::string> files_in(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) out[e.path().filename().string()] = slurp(e.path());
  return out;
}

// A small two-rank checkpoint made by hand: each rank holds W0 and W1, `n` floats each.
exec::CheckpointInfo small_info(int step = 1) {
  exec::CheckpointInfo i;
  i.step = step;
  i.total_steps = 4;
  i.schedule_hash = exec::sha256_hex("a schedule");
  i.schedule_name = "test.sched";
  i.world_size = 2;
  i.model = {{"dim", 32}};
  i.optimizer = {{"lr", 0.001}};
  i.data = {{"bytes", 10}};
  i.seed = 7;
  return i;
}

std::vector<exec::HostState> small_states(float base, std::size_t n = 4) {
  std::vector<exec::HostState> out(2);
  for (int r = 0; r < 2; ++r)
    for (const char* t : {"W0", "W1"}) {
      std::vector<float> v(n);
      for (std::size_t e = 0; e < n; ++e) v[e] = base + static_cast<float>(r * 100 + e);
      out[r][parse_tensor(t)] = v;
    }
  return out;
}

std::vector<exec::StateLayout> layouts_of(const std::vector<exec::HostState>& states) {
  std::vector<exec::StateLayout> out(states.size());
  for (std::size_t r = 0; r < states.size(); ++r)
    for (const auto& [t, v] : states[r]) out[r][t] = v.size() * sizeof(float);
  return out;
}

std::vector<exec::HostState> read_back(const fs::path& dir, const std::vector<exec::StateLayout>& layouts) {
  return exec::read_checkpoint_states(dir.string(), exec::read_checkpoint_info(dir.string()), layouts);
}

// Sets RLIMIT_FSIZE for the scope: a write past `bytes` fails with EFBIG, as on a full disk, also for root.
struct FileSizeLimit {
  rlimit old{};
  void (*old_handler)(int) = nullptr;
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old);
    old_handler = std::signal(SIGXFSZ, SIG_IGN);  // the write fails instead of ending the process
    rlimit lim = old;
    lim.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &lim);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
  }
};

}  // namespace

TEST_CASE("exec checkpoint: a save that fails on one rank's file leaves the previous checkpoint, which resumes bit for bit") {
  Schedule s = fsdp2();
  ScopedDir dir("ckpt-atomic");
  exec::ReplayResult straight = exec::replay(s, tiny_options(s, 4));
  REQUIRE(straight.ok);
  const fs::path ck = dir.path / "ck";

  // The first save fails: a directory sits where rank 1's temporary file goes (root-proof, unlike a
  // permission). Nothing is left that looks like a checkpoint.
  fs::create_directories(ck / ".rank1.tmp");
  exec::ReplayOptions half = tiny_options(s, 4);
  half.stop_after = 2;
  half.save_dir = ck.string();
  exec::ReplayResult r = exec::replay(s, half);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find((ck / ".rank1.tmp").string()) != std::string::npos);
  CHECK(r.error.find("no checkpoint was saved") != std::string::npos);
  CHECK(files_in(ck).empty());
  CHECK_THROWS_AS(exec::read_checkpoint_info(ck.string()), exec::CheckpointError);

  fs::remove(ck / ".rank1.tmp");
  r = exec::replay(s, half);
  REQUIRE(r.ok);
  const auto saved = files_in(ck);
  CHECK(saved.size() == 3);  // the manifest and a file per rank

  // A second save into the same directory fails on rank 1's file: the first checkpoint is untouched.
  fs::create_directories(ck / ".rank1.tmp");
  exec::ReplayOptions more = tiny_options(s, 4);
  more.resume_dir = more.save_dir = ck.string();
  more.stop_after = 3;
  r = exec::replay(s, more);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find((ck / ".rank1.tmp").string()) != std::string::npos);
  CHECK(r.error.find("the checkpoint that was there is unchanged") != std::string::npos);
  CHECK(files_in(ck) == saved);

  // ... and it resumes, bit for bit.
  exec::ReplayOptions rest = tiny_options(s, 4);
  rest.resume_dir = ck.string();
  r = exec::replay(s, rest);
  INFO(r.error);
  REQUIRE(r.ok);
  CHECK(r.first_step == 2);
  REQUIRE(r.losses.size() == 2);
  CHECK(r.losses[0] == straight.losses[2]);
  CHECK(r.losses[1] == straight.losses[3]);
}

TEST_CASE("exec checkpoint: a write that fails half-way (a full disk) leaves the previous checkpoint") {
  ScopedDir dir("ckpt-full");
  const auto first = small_states(1.0f);
  exec::save_checkpoint(dir.path.string(), small_info(1), first);
  const auto saved = files_in(dir.path);
  {
    FileSizeLimit limit(64 << 10);  // each rank file of the second save is 512 KiB
    CHECK_THROWS_WITH_AS(exec::save_checkpoint(dir.path.string(), small_info(2), small_states(2.0f, 1 << 16)),
                         contains((dir.path / ".rank0.tmp").string() + "': File too large"),
                         exec::CheckpointError);
  }
  CHECK(files_in(dir.path) == saved);
  CHECK(read_back(dir.path, layouts_of(first)) == first);
  CHECK(exec::read_checkpoint_info(dir.path.string()).step == 1);
}

TEST_CASE("exec checkpoint: a save replaces the one before and removes its files, two saves at once are refused") {
  ScopedDir dir("ckpt-replace");
  exec::save_checkpoint(dir.path.string(), small_info(1), small_states(1.0f));
  std::ofstream(dir.path / ".rank0.tmp") << "left by a save that was killed";
  std::ofstream(dir.path / "notes.txt") << "the user's";
  const auto second = small_states(2.0f);
  exec::save_checkpoint(dir.path.string(), small_info(2), second);
  auto names = files_in(dir.path);
  CHECK(names.size() == 4);  // the manifest, two rank files, notes.txt
  CHECK(names.count("notes.txt") == 1);
  CHECK(names.count(checkpoint_rank_file(dir.path, 0).filename().string()) == 1);
  CHECK(names.count(checkpoint_rank_file(dir.path, 1).filename().string()) == 1);
  CHECK(read_back(dir.path, layouts_of(second)) == second);

  exec::DirectoryWriter busy(dir.path.string());  // another writer holds the directory
  CHECK_THROWS_WITH_AS(exec::save_checkpoint(dir.path.string(), small_info(3), small_states(3.0f)),
                       contains("another process is writing into"), exec::CheckpointError);
  CHECK(read_back(dir.path, layouts_of(second)) == second);
}

TEST_CASE("exec checkpoint: the manifest is covered by the hash (editing its step is refused)") {
  Schedule s = fsdp2();
  ScopedDir dir("ckpt-edited");
  exec::ReplayOptions o = tiny_options(s, 4);
  o.stop_after = 2;
  o.save_dir = (dir.path / "c").string();
  REQUIRE(exec::replay(s, o).ok);
  std::string text = slurp(dir.path / "c" / "manifest.json");
  for (const char* field : {"\"step\": 2", "\"data_position\": 2"}) {
    auto at = text.find(field);
    REQUIRE(at != std::string::npos);
    std::string edited = text;
    edited[at + std::string(field).size() - 1] = '1';
    std::ofstream(dir.path / "c" / "manifest.json", std::ios::binary) << edited;
    exec::ReplayOptions rest = tiny_options(s, 4);
    rest.resume_dir = (dir.path / "c").string();
    exec::ReplayResult r = exec::replay(s, rest);
    CHECK_FALSE(r.ok);
    CHECK(r.error.find((dir.path / "c" / "manifest.json").string() + ": the manifest does not match its hash") !=
          std::string::npos);
  }
  std::ofstream(dir.path / "c" / "manifest.json", std::ios::binary) << text;
  exec::ReplayOptions rest = tiny_options(s, 4);
  rest.resume_dir = (dir.path / "c").string();
  CHECK(exec::replay(s, rest).ok);
}

TEST_CASE("exec checkpoint: every field of the manifest is checked, naming the file and the field") {
  ScopedDir dir("ckpt-fields");
  exec::save_checkpoint(dir.path.string(), small_info(2), small_states(1.0f));
  const json good = checkpoint_manifest(dir.path);
  const std::string file = (dir.path / "manifest.json").string();
  auto refused = [&](const std::function<void(json&)>& edit, const std::string& want) {
    json m = good;
    edit(m);
    write_sealed_manifest(dir.path, m);
    INFO(m.dump());
    CHECK_THROWS_WITH_AS(exec::read_checkpoint_info(dir.path.string()), contains(file + ": " + want),
                         exec::CheckpointError);
  };
  refused([](json& m) { m["step"] = 0; }, "'step' is 0, out of range (from 1 to 4)");
  refused([](json& m) { m["step"] = 5; }, "'step' is 5, out of range (from 1 to 4)");
  refused([](json& m) { m["step"] = -2; }, "'step' is -2, out of range");
  refused([](json& m) { m["step"] = "2"; }, "'step' is \"2\", not an integer");
  refused([](json& m) { m["step"] = 2.0; }, "'step' is 2.0, not an integer");
  refused([](json& m) { m["step"] = 1e300; }, "'step' is 1e+300, not an integer");
  refused([](json& m) { m["data_position"] = 1; }, "'data_position' is 1, out of range (from 2 to 2)");
  refused([](json& m) { m["total_steps"] = 0; }, "'total_steps' is 0, out of range");
  refused([](json& m) { m["total_steps"] = 4294967296LL; }, "'total_steps' is 4294967296, out of range");
  refused([](json& m) { m["world_size"] = 0; }, "'world_size' is 0, out of range");
  refused([](json& m) { m["world_size"] = 1000000000; }, "'world_size' is 1000000000, out of range (from 1 to 131072)");
  refused([](json& m) { m["seed"] = -1; }, "'seed' is -1, not an integer from 0 to 2^64-1");
  refused([](json& m) { m["seed"] = 1.5; }, "'seed' is 1.5, not an integer");
  refused([](json& m) { m.erase("total_steps"); }, "the field 'total_steps' is missing");
  refused([](json& m) { m["model"] = "tiny"; }, "'model' is \"tiny\", not an object");
  refused([](json& m) { m["schedule_hash"] = "abc"; }, "'schedule_hash' is 'abc', not a SHA-256");
  refused([](json& m) { m["schedule"] = std::string(5000, 'x'); }, "'schedule' is longer than 4096 bytes");
  refused([](json& m) { m["ranks"].erase(1); }, "'ranks' is not a list of 2 rank files");
  refused([](json& m) { m["ranks"][1]["bytes"] = 0; }, "rank 1: 'bytes' is 0, out of range");
  refused([](json& m) { m["ranks"][1]["bytes"] = -5; }, "rank 1: 'bytes' is -5, out of range");
  refused([](json& m) { m["ranks"][1]["bytes"] = 1e30; }, "rank 1: 'bytes' is 1e+30, not an integer");
  refused([](json& m) { m["ranks"][1]["bytes"] = 18446744073709551615ULL; }, "rank 1: 'bytes' is 18446744073709551615, out of range");
  refused([](json& m) { m["ranks"][0]["file"] = "../../etc/passwd"; },
          "rank 0: the file is named '../../etc/passwd', not 'rank0-");
  refused([](json& m) { m["ranks"][0]["file"] = m["ranks"][1]["file"]; }, "rank 0: the file is named 'rank1-");
  refused([](json& m) { m["ranks"][0] = 7; }, "the entry of rank 0 in 'ranks' is 7, not an object");
  refused([](json& m) { m["version"] = 1; }, "a checkpoint of format version 1, written by an older trainsim");
  refused([](json& m) { m["version"] = 3; }, "a checkpoint of format version 3; this trainsim reads version 2");
  refused([](json& m) { m.erase("format"); }, "not a trainsim checkpoint manifest");
  // the hash itself must be one; a manifest that is not JSON, or nested without bound, is named as such
  {
    std::ofstream(dir.path / "manifest.json") << "{\"format\": \"trainsim-checkpoint\", \"version\": 2, \"model\": "
                                              << std::string(1 << 20, '[') << std::string(1 << 20, ']') << "}";
    CHECK_THROWS_WITH_AS(exec::read_checkpoint_info(dir.path.string()),
                         contains(file + ": not a trainsim checkpoint manifest (nested deeper than 32 levels)"),
                         exec::CheckpointError);
    json m = good;
    m["sha256"] = "not a hash";
    std::ofstream(dir.path / "manifest.json") << m.dump();
    CHECK_THROWS_WITH_AS(exec::read_checkpoint_info(dir.path.string()),
                         contains(file + ": 'sha256' is 'not a hash', not a SHA-256"), exec::CheckpointError);
    std::ofstream(dir.path / "manifest.json") << "[1, 2]";
    CHECK_THROWS_WITH_AS(exec::read_checkpoint_info(dir.path.string()), contains(file + ": not a trainsim checkpoint manifest"),
                         exec::CheckpointError);
    std::ofstream(dir.path / "manifest.json") << good.dump().substr(0, 100);
    CHECK_THROWS_WITH_AS(exec::read_checkpoint_info(dir.path.string()), contains(file + ": not a trainsim checkpoint manifest (not JSON"),
                         exec::CheckpointError);
  }
}

TEST_CASE("exec checkpoint: rank files and the manifest must be regular files, read within the manifest's size") {
  ScopedDir dir("ckpt-files");
  const auto states = small_states(1.0f);
  const auto layouts = layouts_of(states);
  exec::save_checkpoint(dir.path.string(), small_info(1), states);
  const exec::CheckpointInfo info = exec::read_checkpoint_info(dir.path.string());
  const fs::path rank1 = checkpoint_rank_file(dir.path, 1);
  const std::string bytes = slurp(rank1);
  auto refused = [&](const std::string& want) {
    CHECK_THROWS_WITH_AS(exec::read_checkpoint_states(dir.path.string(), info, layouts),
                         contains(rank1.string() + want), exec::CheckpointError);
  };
  fs::remove(rank1);
  REQUIRE(mkfifo(rank1.c_str(), 0600) == 0);
  {
    FifoUnblocker unblock(rank1);  // today's code waits for a writer forever
    refused("' is not a regular file (it is a FIFO)");
  }
  fs::remove(rank1);
  fs::create_symlink("/dev/zero", rank1);  // read without a bound, this never ends
  refused("' is not a regular file (it is a character device)");
  fs::remove(rank1);
  fs::create_directory(rank1);
  refused("' is not a regular file (it is a directory)");
  fs::remove(rank1);
  std::ofstream(rank1, std::ios::binary) << bytes.substr(0, bytes.size() / 2);  // truncated
  refused(": the file holds " + std::to_string(bytes.size() / 2) + " bytes, the manifest says " + std::to_string(bytes.size()));
  std::ofstream(rank1, std::ios::binary) << bytes << "more";  // longer than the manifest says: not read past the bound
  refused("' holds " + std::to_string(bytes.size() + 4) + " bytes, more than the limit of " + std::to_string(bytes.size()) + " bytes");
  std::ofstream(rank1, std::ios::binary) << bytes;
  CHECK(exec::read_checkpoint_states(dir.path.string(), info, layouts) == states);
  // a manifest that claims a huge file is refused before anything is read or allocated
  exec::CheckpointInfo huge = info;
  huge.rank_files[1].bytes = std::uint64_t{1} << 50;
  CHECK_THROWS_WITH_AS(exec::read_checkpoint_states(dir.path.string(), huge, layouts),
                       contains(rank1.string() + ": the manifest says it holds 1125899906842624 bytes, but rank 1's "
                                                          "state in this run takes " + std::to_string(bytes.size()) + " bytes"),
                       exec::CheckpointError);

  // the manifest itself
  const fs::path manifest = dir.path / "manifest.json";
  const std::string text = slurp(manifest);
  fs::remove(manifest);
  REQUIRE(mkfifo(manifest.c_str(), 0600) == 0);
  {
    FifoUnblocker unblock(manifest);
    CHECK_THROWS_WITH_AS(exec::read_checkpoint_info(dir.path.string()),
                         contains(manifest.string() + "' is not a regular file (it is a FIFO)"), exec::CheckpointError);
  }
  fs::remove(manifest);
  fs::create_symlink("/dev/zero", manifest);
  CHECK_THROWS_WITH_AS(exec::read_checkpoint_info(dir.path.string()),
                       contains(manifest.string() + "' is not a regular file (it is a character device)"),
                       exec::CheckpointError);
  fs::remove(manifest);
  fs::create_symlink("/nonexistent/manifest.json", manifest);
  CHECK_THROWS_WITH_AS(exec::read_checkpoint_info(dir.path.string()), contains(manifest.string()),
                       exec::CheckpointError);
}

TEST_CASE("exec checkpoint: a forged rank file with the right hashes is still checked tensor by tensor") {
  ScopedDir dir("ckpt-forged");
  const auto states = small_states(1.0f);  // each rank: W0 and W1, 16 bytes each
  const auto layouts = layouts_of(states);
  const std::string floats(16, '\x01');
  const std::string magic = "trainsim-state 1\n";
  const std::size_t size = magic.size() + 2 * (std::string("W0 16\n").size() + 16);
  auto refused = [&](std::string forged, const std::string& want) {
    exec::save_checkpoint(dir.path.string(), small_info(1), states);
    forged.resize(size, 'x');  // the size the layout asks for: the checks behind the size are reached
    write_sealed_rank_file(dir.path, 1, forged);
    INFO(want);
    try {
      read_back(dir.path, layouts);
      FAIL("a forged rank file was accepted");
    } catch (const exec::CheckpointError& e) {
      const std::string msg = e.what();
      CHECK(msg.find(checkpoint_rank_file(dir.path, 1).string() + ": " + want) != std::string::npos);
      CHECK(msg.find('\x1b') == std::string::npos);  // no raw control bytes reach a terminal
    }
  };
  refused(magic + "W0 16\n" + floats + "W0 16\n" + floats, "it holds W0 twice");
  refused(magic + "W0 16\n" + floats + "W2 16\n" + floats, "it holds W2, which this run's rank does not carry");
  refused(magic + "W0 12\n" + floats.substr(0, 12) + "W1 20\n" + floats + "xxxx", "its W0 is 12 bytes, this run's is 16 bytes");
  refused(magic + "W0 -16\n", "malformed tensor header 'W0 -16' at byte 17");
  refused(magic + "W0 99999999999999999999\n", "malformed tensor header 'W0 99999999999999999999'");
  refused(magic + "W0 999999999999999999\n", "its W0 is 999999999999999999 bytes, this run's is 16 bytes");
  refused(magic + "W0 16 \n", "malformed tensor header");
  refused(magic + "\x1b[31mW0 16\n", "malformed tensor header '\\x1b[31mW0 16'");
  refused(magic + "W\xff\xfe 16\n", "malformed tensor header");
  refused(magic + std::string(300, 'W'), "malformed tensor header at byte 17");
  refused("trainsim-state 9\n", "not a trainsim state file");
  // A diverged run's state (issue 38: `sample` printed NUL bytes from it, `export` wrote it): refused by name.
  std::string nan_floats = floats;
  nan_floats.replace(4, 4, std::string("\x00\x00\xc0\x7f", 4));  // element 1: a quiet NaN
  refused(magic + "W0 16\n" + floats + "W1 16\n" + nan_floats,
          "a value is not finite (W1: NaN (element 1)): the checkpoint comes from a run that diverged");
}

TEST_CASE("exec checkpoint: a state that is not finite is not saved, the previous checkpoint stays the latest") {
  ScopedDir dir("ckpt-diverged");
  const auto first = small_states(1.0f);
  exec::save_checkpoint(dir.path.string(), small_info(1), first);
  const auto saved = files_in(dir.path);
  auto diverged = small_states(2.0f);
  diverged[1].begin()->second[2] = std::numeric_limits<float>::infinity();
  CHECK(exec::first_non_finite(first).empty());
  CHECK(exec::first_non_finite(diverged) == "rank 1's W0: infinity (element 2)");
  CHECK_THROWS_WITH_AS(exec::save_checkpoint(dir.path.string(), small_info(2), diverged),
                       contains("the state is not finite (rank 1's W0: infinity (element 2)): the run diverged; the "
                                "checkpoint that was there (if any) is kept"),
                       exec::CheckpointError);
  CHECK(files_in(dir.path) == saved);
  CHECK(read_back(dir.path, layouts_of(first)) == first);
  CHECK(exec::read_checkpoint_info(dir.path.string()).step == 1);
}

TEST_CASE("exec checkpoint: resuming on a corpus whose content changed names the file and both SHA-256s") {
  Schedule s = fsdp2();
  ScopedDir dir("ckpt-corpus");
  const fs::path corpus = dir.path / "corpus.txt";
  const std::string text = slurp(test_corpus());
  std::ofstream(corpus, std::ios::binary) << text;
  exec::ReplayOptions o = tiny_options(s, 4);
  o.data_files = {corpus.string()};
  o.stop_after = 2;
  o.save_dir = (dir.path / "c").string();
  REQUIRE(exec::replay(s, o).ok);

  std::string changed = text;
  changed[changed.size() / 2] ^= 1;  // one byte: same path, same size
  std::ofstream(corpus, std::ios::binary) << changed;
  exec::ReplayOptions rest = tiny_options(s, 4);
  rest.data_files = {corpus.string()};
  rest.resume_dir = (dir.path / "c").string();
  exec::ReplayResult r = exec::replay(s, rest);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("the corpus differs: '" + corpus.string() + "' had " + std::to_string(text.size()) + " bytes, sha256 " +
                     exec::sha256_hex(text) + " in the checkpoint; now " + std::to_string(text.size()) + " bytes, sha256 " +
                     exec::sha256_hex(changed)) != std::string::npos);

  // another file altogether is named too
  rest.data_files = {test_corpus()};
  r = exec::replay(s, rest);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("it was made on other data: '" + corpus.string() + "' (" + std::to_string(text.size()) +
                     " bytes); this run reads '" + test_corpus() + "'") != std::string::npos);

  std::ofstream(corpus, std::ios::binary) << text;  // the same bytes again: it resumes
  rest.data_files = {corpus.string()};
  r = exec::replay(s, rest);
  INFO(r.error);
  CHECK(r.ok);
}
