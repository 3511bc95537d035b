// Schedule generators (DESIGN §3): the schedules used in production, as data.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "schedules/rank_source.h"
#include "schedules/schedule.h"

namespace trainsim {

/// Parameters of a generator. Each kind reads the fields it needs and ignores the others.
struct GenOptions {
  int stages = 4;           ///< pipeline stages (pipeline kinds); world size = stages * dp
  int microbatches = 8;     ///< microbatches per step (per pipeline for pp-fsdp; per rank for data parallel)
  int chunks = 1;           ///< model chunks (virtual stages) per rank: interleaved-1f1b, looped-bfs
  int layers = 0;           ///< model layers of ddp/zero1/zero2/fsdp/zero3-owner and tp (0: 4) and 3d (0: pp x chunks, 4 when 1)
  int dp = 1;               ///< data-parallel degree: ranks for ddp/zero1/zero2/fsdp/zero3-owner, replicas for pp-fsdp and 3d
  int prefetch = 1;         ///< fsdp: how many layers ahead the all-gather is issued
  bool reshard_after_forward = true;  ///< fsdp: free gathered weights after forward (gather again in backward)
  int tp = 1;               ///< tp, 3d: tensor-parallel degree, 1 to Tensor::kMaxTpSize
  int pp = 1;               ///< 3d: pipeline stages
  bool sequence_parallel = false;  ///< tp, 3d: sequence parallelism (reduce-scatter / all-gather over the TP group)
  int zero = 0;             ///< 3d: data parallelism: 0 plain (DDP), 1 ZeRO-1 (as zero1), 3 FSDP of each TP slice
  /// 3d: context parallelism, ranks splitting each sequence (CP groups cp0, cp1, ... next to the TP groups in the
  /// rank order; grads reduced over dp x cp)
  int cp = 1;
  std::string schedule = "1f1b";  ///< 3d: the pipeline order: 1f1b, interleaved-1f1b (with chunks) or zb-h1
  /// A stage layout (hardware/stage_layout.h, Megatron-LM's --pipeline-model-parallel-layout, e.g.
  /// "Et*3|t*4|t*4|t*3L"): one stage per schedule layer, written to the header's `layout` line. "": none (the
  /// even split). For the kinds with --layers (data parallel, tp, 3d) its stages are the layers when `layers` is 0.
  std::string layout;
};

/// The generator kinds: gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zbv, dualpipev, interleaved-zb, ddp,
/// zero1, zero2, fsdp, zero3-owner, pp-fsdp, tp, 3d. zero3-owner: ZeRO-3 sharded between tensors, `dp` ranks,
/// layer l owned whole by rank l mod dp (broadcast before each use, grads reduced to the owner; .sched version
/// 2). tp: `tp` ranks splitting every layer (Megatron-LM's tensor parallelism); 3d: tp x cp x dp x pp ranks,
/// rank = tp + T * (cp + C * (dp + D * pp)) (docs/design.md, "Tensor parallelism"; C = 1 without --cp). zbv and dualpipev: `stages` ranks holding 2 x stages layers in V placement
/// (PyTorch's ScheduleZBVZeroBubble and ScheduleDualPipeV; dualpipev needs microbatches >= 2 x stages);
/// interleaved-zb: `chunks` looped chunks per rank (PyTorch's ScheduleInterleavedZeroBubble).
/// interleaved-1f1b follows Megatron-LM when the microbatches are a multiple of the stages and PyTorch's
/// ScheduleInterleaved1F1B otherwise (rounds = max(1, m / p) rounds of equal size; refused when m does not
/// split into them).
const std::vector<std::string>& generator_kinds();

/// Generates a schedule of `kind`. Throws std::invalid_argument for an unknown kind or bad options
/// (naming the option and the allowed range), also when the options ask for more ranks, layers or
/// microbatches than schedules/limits.h allows, or more than kMaxGeneratedWork layer-microbatch pairs, and for
/// a layout that cannot be read (naming the position) or whose stages are not the schedule's layers.
Schedule generate(const std::string& kind, const GenOptions& options);
/// The same schedule as a RankSource, op for op: the pipeline kinds (gpipe, 1f1b, interleaved-1f1b, looped-bfs,
/// zb-h1, zbv, dualpipev, interleaved-zb, pp-fsdp, tp, 3d) make each rank's ops when the source is asked for them,
/// so that `gen --sim` never holds every rank's ops at once; the data-parallel kinds hold the whole schedule.
/// Throws as generate() does.
std::unique_ptr<RankSource> generate_ranks(const std::string& kind, const GenOptions& options);

}  // namespace trainsim
