// The executor's data: the corpus is read as bytes, split 90/10, and microbatch b of step s is the same
// tokens whoever reads it; targets are the next bytes. On the real corpus, the tiny model's loss falls.
#include <doctest/doctest.h>

#include <fstream>
#include <numeric>

#include "cli_helpers.h"
#include "exec/data.h"
#include "exec_helpers.h"
#include "schedules/generators.h"

using namespace trainsim;
using namespace trainsim::testing;

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
  d.validation_batch(m, 0, tok.data(), tgt.data());
  CHECK(tok[0] == d.token(d.train_size()));
}

TEST_CASE("exec data: missing or tiny corpora are clear errors") {
  CHECK_THROWS_WITH_AS(exec::TokenData({"/nonexistent/file.txt"}), doctest::Contains("/nonexistent/file.txt"),
                       exec::DataError);
  auto dir = fresh_dir("tiny-corpus");
  std::string path = (dir / "t.txt").string();
  {
    std::ofstream f(path);
    f << "hello";
  }
  exec::TokenData d({path});
  CHECK_THROWS_WITH_AS(d.check_fits(exec::preset("tiny")), doctest::Contains("too short"), exec::DataError);
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
