// The executor's data: the corpus is read as bytes, split 90/10, and microbatch b of step s is the same
// tokens whoever reads it; targets are the next bytes. On the real corpus, the tiny model's loss falls. The
// corpus is read into memory once (a file changed or truncated afterwards changes nothing), regular files
// only, within a size limit, and hashed.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include <sys/stat.h>

#include "checkpoint_helpers.h"
#include "cli_helpers.h"
#include "exec/data.h"
#include "exec/sha256.h"
#include "exec_helpers.h"
#include "schedules/generators.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {
// doctest::Contains of a std::string (it takes a C string or doctest::String; it keeps a copy).
doctest::Contains contains(const std::string& text) { return doctest::Contains(text.c_str()); }
}  // namespace

TEST_CASE("exec data: bytes are tokens, the split is 90/10, microbatches tile the training text") {
  exec::TokenData d({test_corpus()});
  std::string text = slurp(test_corpus());
  REQUIRE(d.size() == static_cast<long>(text.size()));
  CHECK(d.train_size() == d.size() - d.size() / 10);
  for (long i : {0L, 1L, d.size() - 1}) CHECK(d.token(i) == static_cast<unsigned char>(text[i]));
  exec::ModelConfig m = exec::preset("tiny");
  std::vector<int> tok(m.tokens_per_microbatch()), tgt(tok.size()), tok2(tok.size()), tgt2(tok.size());
  d.microbatch(m, 2, 4, 1, tok.data(), tgt.data());
  d.microbatch(m, 2, 4, 1, tok2.data(), tgt2.data());
  CHECK(tok == tok2);
  // sequence i of microbatch b of step s starts at ((s·M + b)·mb + i)·seq
  long start = ((2 * 4 + 1) * m.microbatch_size + 0) * m.seq;
  for (int t = 0; t < m.seq; ++t) {
    CHECK(tok[t] == d.token(start + t));
    CHECK(tgt[t] == d.token(start + t + 1));
  }
  for (int t = 0; t + 1 < m.seq; ++t) CHECK(tgt[t] == tok[t + 1]);
  d.validation_sequences(m, 0, m.microbatch_size, tok.data(), tgt.data());
  CHECK(tok[0] == d.token(d.train_size()));
  // Validation sequence g starts at train + g·seq modulo (validation bytes − seq − 1): the same sequence whatever
  // the batch it is read in.
  const long span = d.size() - d.train_size() - m.seq - 1;
  for (long g : {1L, 7L, 1000L}) {
    std::vector<int> one(m.seq), one_t(m.seq);
    d.validation_sequences(m, g, 1, one.data(), one_t.data());
    const long vstart = d.train_size() + (g * m.seq) % span;
    CHECK(one[0] == d.token(vstart));
    CHECK(one_t[m.seq - 1] == d.token(vstart + m.seq));
  }
  // Training starts wrap modulo (training bytes − seq − 1), so that seq+1 bytes fit (docs/executor.md §2).
  const long tspan = d.train_size() - m.seq - 1;
  const long step = tspan / (4 * m.microbatch_size * m.seq) + 3;  // far enough to wrap
  d.microbatch(m, step, 4, 2, tok.data(), tgt.data());
  const long wrapped = (((step * 4 + 2) * m.microbatch_size) * m.seq) % tspan;
  CHECK(tok[0] == d.token(wrapped));
  CHECK(tgt[m.seq - 1] == d.token(wrapped + m.seq));
}

TEST_CASE("exec data: missing or tiny corpora are clear errors") {
  CHECK_THROWS_WITH_AS(exec::TokenData({"/nonexistent/file.txt"}), contains("/nonexistent/file.txt"),
                       exec::DataError);
  ScopedDir dir("tiny-corpus");
  std::string path = (dir.path / "t.txt").string();
  {
    std::ofstream f(path);
    f << "hello";
  }
  exec::TokenData d({path});
  CHECK_THROWS_WITH_AS(d.check_fits(exec::preset("tiny")), contains("too short"), exec::DataError);
}

TEST_CASE("exec data: the default corpus is the fortunes package, and the tiny model learns from it") {
  std::vector<std::string> files = exec::TokenData::default_files();
  REQUIRE(files.size() > 5);
  GenOptions g;
  g.dp = 2, g.layers = 2, g.microbatches = 2;
  Schedule s = generate("ddp", g);
  exec::ReplayOptions o = tiny_options(s, 60);
  o.data_files = {};  // the default
  o.optimizer.lr = 3e-3f;
  exec::ReplayResult r = exec::replay(s, o);
  REQUIRE(r.ok);
  double first = r.losses.front();
  double last10 = std::accumulate(r.losses.end() - 10, r.losses.end(), 0.0) / 10;
  CHECK(first > 5.0);           // about ln 256 = 5.55 at initialisation
  CHECK(last10 < first - 1.5);  // byte-level English is far more predictable than uniform
}

TEST_CASE("exec data: the corpus is read once, a file truncated or rewritten afterwards changes nothing (no SIGBUS)") {
  ScopedDir dir("corpus-shrinks");
  const std::string text = slurp(test_corpus());
  const std::filesystem::path path = dir.path / "c.txt";
  std::ofstream(path, std::ios::binary) << text;
  exec::TokenData d({path.string()});
  std::filesystem::resize_file(path, 0);  // a memory map of it would raise SIGBUS on the next token
  REQUIRE(d.size() == static_cast<long>(text.size()));
  std::string seen;
  for (long i = 0; i < d.size(); ++i) seen += static_cast<char>(d.token(i));
  CHECK(seen == text);
  std::ofstream(path, std::ios::binary) << std::string(text.size(), 'z');
  CHECK(d.token(0) == static_cast<unsigned char>(text[0]));
  CHECK(d.sha256() == exec::sha256_hex(text));
}

TEST_CASE("exec data: several files are one stream in order, empty ones skipped, each hashed") {
  ScopedDir dir("corpus-files");
  std::ofstream(dir.path / "a") << "first file\n";
  std::ofstream(dir.path / "empty") << "";
  const std::string b = std::string("second\xff") + '\0' + "file";  // any bytes are tokens
  std::ofstream(dir.path / "b", std::ios::binary) << b;
  exec::TokenData d({(dir.path / "a").string(), (dir.path / "empty").string(), (dir.path / "b").string()});
  const std::string whole = "first file\n" + b;
  REQUIRE(d.size() == static_cast<long>(whole.size()));
  for (long i = 0; i < d.size(); ++i) CHECK(d.token(i) == static_cast<unsigned char>(whole[i]));
  nlohmann::json id = d.identity();
  CHECK(id["bytes"] == whole.size());
  CHECK(id["sha256"] == exec::sha256_hex(whole));
  REQUIRE(id["files"].size() == 3);
  CHECK(id["files"][0]["path"] == (dir.path / "a").string());
  CHECK(id["files"][0]["sha256"] == exec::sha256_hex("first file\n"));
  CHECK(id["files"][1]["bytes"] == 0);
  CHECK(id["files"][2]["bytes"] == 12);

  // a path that is not UTF-8 is recorded with U+FFFD in place of the bad bytes, so the JSON can be written
  std::ofstream(dir.path / "odd\xff.txt") << "text";
  exec::TokenData odd({(dir.path / "odd\xff.txt").string()});
  CHECK(odd.identity()["files"][0]["path"] == (dir.path / "odd\xef\xbf\xbd.txt").string());
  CHECK_NOTHROW(odd.identity().dump());
}

TEST_CASE("exec data: a corpus file that is not a regular file, or too large, is a clear error") {
  ScopedDir dir("corpus-odd");
  const std::filesystem::path fifo = dir.path / "fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  {
    FifoUnblocker unblock(fifo);
    CHECK_THROWS_WITH_AS(exec::TokenData({fifo.string()}),
                         contains("the corpus file '" + fifo.string() + "' is not a regular file (it is a FIFO)"),
                         exec::DataError);
  }
  CHECK_THROWS_WITH_AS(exec::TokenData({dir.path.string()}),
                       contains("the corpus file '" + dir.path.string() + "' is not a regular file (it is a directory)"),
                       exec::DataError);
  CHECK_THROWS_WITH_AS(exec::TokenData({"/dev/zero"}),
                       contains("the corpus file '/dev/zero' is not a regular file (it is a character device)"),
                       exec::DataError);
  std::filesystem::create_symlink("/dev/urandom", dir.path / "link");
  CHECK_THROWS_WITH_AS(exec::TokenData({(dir.path / "link").string()}), contains("(it is a character device)"),
                       exec::DataError);
  // a name with control bytes is shown escaped
  CHECK_THROWS_WITH_AS(exec::TokenData({(dir.path / "no\x1b[2Jsuch").string()}), contains("no\\x1b[2Jsuch"),
                       exec::DataError);

  // the limit counts all the files together (the default, kMaxCorpusBytes, is 4 GiB)
  std::ofstream(dir.path / "a") << std::string(600, 'a');
  std::ofstream(dir.path / "b") << std::string(500, 'b');
  CHECK(exec::TokenData({(dir.path / "a").string(), (dir.path / "b").string()}, 1100).size() == 1100);
  CHECK_THROWS_WITH_AS(exec::TokenData({(dir.path / "a").string(), (dir.path / "b").string()}, 1000),
                       contains("the corpus is too large: with the corpus file '" + (dir.path / "b").string() +
                                         "' (500 bytes) it holds 1100 bytes, more than the limit of 1000 bytes"),
                       exec::DataError);
  CHECK(exec::kMaxCorpusBytes == std::size_t{4} << 30);
}
