// The generator registry: kind names and dispatch (schedules/generators.h).
#include <algorithm>
#include <limits>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "schedules/input.h"  // shown(): long input quoted in errors at most 80 bytes
#include "schedules/generators.h"
#include "schedules/generators/builder.h"
#include "schedules/limits.h"

namespace trainsim {

const std::vector<std::string>& generator_kinds() {
  static const std::vector<std::string> kinds = {"gpipe", "1f1b",  "interleaved-1f1b", "looped-bfs", "zb-h1", "zbv", "dualpipev", "interleaved-zb",
                                                 "ddp",   "zero1", "zero2",            "fsdp",       "zero3-owner", "pp-fsdp", "tp", "3d", "ep"};
  return kinds;
}

namespace {

// The limits of schedules/limits.h on what the options ask for, and a bound on the work (layers x microbatches,
// each one or more ops), so that a mistyped option is refused at once rather than running out of memory.
// Returns the schedule layers the options ask for.
long long check_size(const std::string& kind, const GenOptions& o) {
  const bool data_parallel = kind == "ddp" || kind == "zero1" || kind == "zero2" || kind == "fsdp" || kind == "zero3-owner" || kind == "ep";
  const bool pp_fsdp = kind == "pp-fsdp";
  const bool chunked = interleaved_schedule(kind);
  const bool tensor_parallel = kind == "tp" || kind == "3d";
  auto pos = [](int v) { return static_cast<long long>(std::max(v, 1)); };
  // Products of up to three options, each below 2^31: saturated rather than wrapped.
  auto mul = [](long long a, long long b) { return a > std::numeric_limits<long long>::max() / b ? std::numeric_limits<long long>::max() : a * b; };
  long long world = data_parallel ? pos(o.dp) : pp_fsdp ? pos(o.stages) * pos(o.dp) : pos(o.stages);
  long long layers = data_parallel ? (o.layers == 0 ? 4 : pos(o.layers))
                                   : pos(o.stages) * (chunked ? pos(o.chunks) : v_shaped_schedule(kind) ? 2 : 1);
  long long microbatches = pos(o.microbatches) * (data_parallel || pp_fsdp ? pos(o.dp) : 1);
  long long work_per_pair = 1;
  if (tensor_parallel) gen::require_tp_degree(kind, o.tp);  // before the ranks it multiplies
  if (tensor_parallel) {  // tp: tp ranks; 3d: tp x pp x dp ranks, each TP rank doing every pass of its pipeline
    const bool three_d = kind == "3d";
    // Context parallelism (3d --cp) multiplies the data-parallel replicas: each CP rank runs its own microbatches.
    const long long pp = three_d ? pos(o.pp) : 1, dp = three_d ? mul(pos(o.dp), pos(o.cp)) : 1;
    const long long chunks = !three_d ? 1 : chunks_per_rank(o.schedule, static_cast<int>(pos(o.chunks)));
    world = mul(mul(pos(o.tp), pp), dp);
    layers = o.layers != 0 ? pos(o.layers) : mul(pp, chunks) == 1 ? 4 : mul(pp, chunks);
    if (three_d && !o.chunk_blocks.empty()) {  // one layer per block
      layers = 0;
      for (int b : o.chunk_blocks) layers = std::min<long long>(layers + std::max(b, 1), std::numeric_limits<int>::max());
    }
    microbatches = mul(pos(o.microbatches), dp);
    work_per_pair = pos(o.tp);
  }
  auto over = [&](const char* what, long long v, long long limit) {
    if (v > limit)
      throw std::invalid_argument(fmt::format("{}: the options ask for {} {}, above the limit of {} "
                                              "(docs/schedule-format.md, Limits)",
                                              kind, v, what, limit));
  };
  over("ranks", world, kMaxWorldSize);
  over("layers", layers, kMaxCount);
  over("microbatches", microbatches, kMaxCount);
  if (work_per_pair == 1)
    over("layer-microbatch pairs (the work of one step)", layers * microbatches, kMaxGeneratedWork);
  else
    over("layer-microbatch pairs times TP ranks (the work of one step)", mul(layers * microbatches, work_per_pair),
         kMaxGeneratedWork);
  // What one rank does, in ops (an upper estimate: about 8 ops per layer and microbatch a rank runs, 12 with TP's
  // collectives), and for the kinds that hold every rank's ops at once, all of them: the memory the generation
  // takes is proportional to these, so a mistyped --microbatches or --dp is refused before it runs for minutes.
  const long long stages = kind == "3d" ? pos(o.pp) : data_parallel || kind == "tp" ? 1 : pos(o.stages);
  const long long rank_pairs = mul((layers + stages - 1) / stages, pos(o.microbatches));
  const long long rank_ops = mul(rank_pairs, tensor_parallel ? 12 : data_parallel ? 10 : 8);
  if (rank_ops > kMaxRankOps)
    throw std::invalid_argument(fmt::format("{}: the options ask for about {} ops on one rank ({} layers x {} microbatches "
                                            "of a rank), above the limit of {} (docs/schedule-format.md, Limits)",
                                            kind, rank_ops, (layers + stages - 1) / stages, pos(o.microbatches),
                                            kMaxRankOps));
  if (data_parallel && mul(rank_ops, world) > kMaxHeldOps)
    throw std::invalid_argument(fmt::format("{}: the options ask for about {} ops over {} ranks, held at once, above the "
                                            "limit of {} (docs/schedule-format.md, Limits)",
                                            kind, mul(rank_ops, world), world, kMaxHeldOps));
  return layers;
}

bool takes_layers(const std::string& kind) {
  return kind == "ddp" || kind == "zero1" || kind == "zero2" || kind == "fsdp" || kind == "zero3-owner" || kind == "ep" ||
         kind == "tp" || kind == "3d";
}

// The options' layout, read (nullopt without one); for a kind with --layers left at 0, its stages become the
// layers. Throws std::invalid_argument naming the position of what cannot be read.
std::optional<hw::StageLayout> read_layout(const std::string& kind, GenOptions& o) {
  if (o.layout.empty()) return std::nullopt;
  try {
    hw::StageLayout layout = hw::StageLayout::parse(o.layout);
    if (o.layers == 0 && takes_layers(kind)) o.layers = layout.layers();
    return layout;
  } catch (const hw::LayoutError& e) {
    throw std::invalid_argument(fmt::format("{}: --layout '{}': {}", kind, shown(o.layout), e.what()));
  }
}

std::unique_ptr<RankSource> generate_kind(const std::string& kind, const GenOptions& options) {
  if (kind == "gpipe") return gen::gen_gpipe(options);
  if (kind == "1f1b") return gen::gen_1f1b(options);
  if (kind == "interleaved-1f1b") return gen::gen_interleaved_1f1b(options);
  if (kind == "looped-bfs") return gen::gen_looped_bfs(options);
  if (kind == "zb-h1") return gen::gen_zb_h1(options);
  if (kind == "zbv") return gen::gen_zbv(options);
  if (kind == "dualpipev") return gen::gen_dualpipev(options);
  if (kind == "interleaved-zb") return gen::gen_interleaved_zb(options);
  if (kind == "ddp" || kind == "zero1" || kind == "zero2" || kind == "fsdp")
    return std::make_unique<HeldSchedule>(gen::gen_data_parallel(kind, options));
  if (kind == "pp-fsdp") return gen::gen_pp_fsdp(options);
  if (kind == "zero3-owner") return std::make_unique<HeldSchedule>(gen::gen_zero3_owner(options));
  if (kind == "ep") return std::make_unique<HeldSchedule>(gen::gen_expert_parallel(options));
  if (kind == "tp") return gen::gen_tp(options);
  if (kind == "3d") return gen::gen_3d(options);
  std::string names;
  for (const auto& k : generator_kinds()) names += (names.empty() ? "" : ", ") + k;
  throw std::invalid_argument("unknown generator '" + kind + "' (the kinds are: " + names + ")");
}

}  // namespace

std::unique_ptr<RankSource> generate_ranks(const std::string& kind, const GenOptions& given) {
  GenOptions options = given;
  if (!options.chunk_blocks.empty() && (kind != "3d" || !options.layout.empty()))
    throw std::invalid_argument(fmt::format("{}: the blocks of each stage chunk go with 3d and no --layout", kind));
  const std::optional<hw::StageLayout> layout = read_layout(kind, options);
  const long long layers = check_size(kind, options);
  if (layout && layout->layers() != layers)
    throw std::invalid_argument(fmt::format(
        "{}: --layout '{}' has {} stages but the schedule has {} layers: one stage per schedule layer ({})", kind,
        shown(options.layout), layout->layers(), layers,
        takes_layers(kind) ? "--layers"
        : kind == "zbv" || kind == "dualpipev" ? "2 x --stages, in V placement"
        : kind == "interleaved-1f1b" || kind == "looped-bfs" || kind == "interleaved-zb" ? "--stages x --chunks"
                                                                                        : "one per stage"));
  std::unique_ptr<RankSource> src = generate_kind(kind, options);
  if (layout) src->header().layout = layout;
  return src;
}

Schedule generate(const std::string& kind, const GenOptions& options) { return generate_ranks(kind, options)->take(); }

int microbatches_for_global_batch(const std::string& kind, const GenOptions& o, long long global_batch,
                                  int microbatch_size) {
  const bool data_parallel = kind == "ddp" || kind == "zero1" || kind == "zero2" || kind == "fsdp" || kind == "zero3-owner" || kind == "ep";
  const long long replicas = data_parallel || kind == "pp-fsdp" || kind == "3d" ? std::max(o.dp, 1) : 1;
  const long long per_microbatch = replicas * std::max(microbatch_size, 1);
  if (global_batch < 1)
    throw std::invalid_argument(fmt::format("{}: --global-batch must be at least 1 (got {})", kind, global_batch));
  if (global_batch % per_microbatch != 0)
    throw std::invalid_argument(fmt::format(
        "{}: --global-batch {} does not split into whole microbatches: it must be a multiple of {} ({} x microbatch "
        "size {} sequences)",
        kind, global_batch, per_microbatch, replicas > 1 ? fmt::format("{} data-parallel replicas", replicas) : "1 replica",
        std::max(microbatch_size, 1)));
  const long long m = global_batch / per_microbatch;
  if (m > std::numeric_limits<int>::max())
    throw std::invalid_argument(fmt::format("{}: --global-batch {} asks for {} microbatches per replica, above the "
                                            "limit of {}",
                                            kind, global_batch, m, std::numeric_limits<int>::max()));
  return static_cast<int>(m);
}

GenOptions per_block_layers(const std::string& kind, GenOptions o, int blocks) {
  if (o.layers != 0 || !o.chunk_blocks.empty() || blocks < 1) return o;
  if (kind == "3d") {
    if (!o.layout.empty()) {
      try {
        o.chunk_blocks = hw::StageLayout::parse(o.layout).blocks_per_layer();
      } catch (const hw::LayoutError& e) {
        throw std::invalid_argument(fmt::format("{}: --layout '{}': {}", kind, shown(o.layout), e.what()));
      }
      o.layout.clear();
      return o;
    }
    const long long chunks =
        static_cast<long long>(std::max(o.pp, 1)) *
        chunks_per_rank(o.schedule, std::max(o.chunks, 1));
    if (chunks > hw::kMaxLayoutCount) return o;  // (the generator refuses the options with the limit they meet)
    o.chunk_blocks = hw::StageLayout::even(blocks, static_cast<int>(chunks)).blocks_per_layer();
    return o;
  }
  if (o.layout.empty() && (takes_layers(kind) && kind != "3d")) o.layers = blocks;
  return o;
}

GenOptions model_dense_layers(const std::string& kind, GenOptions o, int blocks, int dense_blocks) {
  if ((kind != "ep" && !(kind == "3d" && o.ep > 1)) || dense_blocks <= 0 || blocks < 1) return o;
  std::vector<int> per_layer;
  if (kind == "3d" && !o.chunk_blocks.empty()) {  // one layer per block (a chunk of no block: one layer of none)
    for (int b : o.chunk_blocks)
      if (b == 0) per_layer.push_back(0);
      else per_layer.insert(per_layer.end(), b, 1);
  } else if (!o.layout.empty()) {
    GenOptions read = o;  // (read_layout may set its layers)
    per_layer = read_layout(kind, read)->blocks_per_layer();
  } else {
    const int layers = o.layers == 0 ? 4 : o.layers;
    if (layers > blocks) return o;  // (the hardware model refuses a schedule of more layers than blocks)
    per_layer = hw::StageLayout::even(blocks, layers).blocks_per_layer();
  }
  // The leading layers whose blocks all come before the first MoE block.
  int dense = 0, first = 0;
  for (int n : per_layer) {
    if (first + n > dense_blocks) break;
    first += n, ++dense;
  }
  o.dense_layers = std::min(dense, static_cast<int>(per_layer.size()) - 1);
  return o;
}

}  // namespace trainsim
