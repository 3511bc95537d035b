#include "exec/sequence_shard.h"

#include <stdexcept>

#include <fmt/format.h>

namespace trainsim::exec {

namespace {

// Appends a copy, merged with the last one when both ends continue it.
void push(std::vector<CopyRun>& runs, long src, long dst, long count) {
  if (count <= 0) return;
  if (!runs.empty()) {
    CopyRun& last = runs.back();
    if (last.src + last.count == src && last.dst + last.count == dst) {
      last.count += count;
      return;
    }
  }
  runs.push_back({src, dst, count});
}

}  // namespace

SequenceShards sequence_shards(const ModelShapes& shapes, const Tensor& t) {
  const ModelConfig& m = shapes.model;
  const int k = t.num_shards;
  if (k < 1 || m.seq % k != 0)
    throw std::invalid_argument(fmt::format(
        "{} is sequence shard {} of {}, but a sequence of {} tokens does not split into {} equal shards: sequence "
        "parallelism shards every sequence by tokens, so the sequence length (--seq) must be a multiple of the TP "
        "degree",
        t.str(), t.shards.str(), k, m.seq, k));
  SequenceShards s;
  s.sequences = static_cast<long>(t.batches.size()) * m.microbatch_size;
  s.rows = m.seq / k;
  s.width = shapes.row_width(t);
  s.count = k;
  return s;
}

std::vector<CopyRun> gather_copies(const SequenceShards& s, int held, int per, const std::vector<int>& order) {
  std::vector<CopyRun> runs;
  const long b = s.block();
  for (long i = 0; i < s.sequences; ++i)
    for (int u = 0; u < held; ++u) {
      const int from = order.empty() ? u : order[u];
      const long q = from / per, x = from % per;
      push(runs, ((q * s.sequences + i) * per + x) * b, (i * held + u) * b, b);
    }
  return runs;
}

std::vector<CopyRun> scatter_copies(const SequenceShards& s) {
  std::vector<CopyRun> runs;
  const long b = s.block();
  for (int m = 0; m < s.count; ++m)
    for (long i = 0; i < s.sequences; ++i) push(runs, (i * s.count + m) * b, (m * s.sequences + i) * b, b);
  return runs;
}

bool is_identity(const std::vector<CopyRun>& runs, long elements) {
  return runs.size() == 1 && runs.front() == CopyRun{0, 0, elements};
}

}  // namespace trainsim::exec
