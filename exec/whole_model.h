// The whole model from the pieces a replay leaves on its ranks (DESIGN §5): every rank's weights (FSDP shards,
// TP slices, pipeline layers) put back together per parameter, and that model as one flat buffer of the
// single-layer layout (exec/layout.h), which the single-device code (the reference, the evaluation, sampling
// and export) reads.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "exec/checkpoint.h"
#include "exec/layout.h"
#include "exec/shapes.h"

namespace trainsim::exec {

/// The model's parameters by global name (exec/layout.h: "embedding", "blocks.3.wqkv", "head"), each the whole
/// parameter, row-major [out, in] as torch.nn.Linear stores it.
using NamedParameters = std::map<std::string, std::vector<float>>;

/// Puts every rank's weights (`ranks[r]`, its W tensors; O and others are ignored) together per parameter:
/// each element of a shard or TP slice goes to its place in the whole parameter. Sets `replicas_identical`
/// to false when two ranks hold different bits for one element (data-parallel copies, the norm gains every TP
/// slice holds). Throws std::runtime_error when no rank holds some element, naming it, and
/// std::invalid_argument for a tensor `shapes` has no layout for or whose size is not its layout's.
NamedParameters assemble_parameters(const ModelShapes& shapes, const std::vector<HostState>& ranks,
                                    bool& replicas_identical);

/// AdamW's moments of every parameter, by the parameters' names (each the whole parameter's shape).
struct AdamWMoments {
  NamedParameters first, second;  ///< m and v (torch.optim.AdamW's exp_avg and exp_avg_sq)
};

/// Puts every rank's optimizer state (its O tensors: per shard, the c first moments then the c second moments)
/// together per parameter. Throws as assemble_parameters does.
AdamWMoments assemble_moments(const ModelShapes& shapes, const std::vector<HostState>& ranks);

/// A checkpoint's model put together: what sampling and export read.
struct SavedModel {
  CheckpointInfo info;
  ModelConfig model;        ///< the manifest's model
  NamedParameters weights;  ///< every parameter, whole
  AdamWMoments moments;     ///< with read_saved_model(dir, true) only
};

/// Reads the checkpoint in `dir` (read_checkpoint_info, read_checkpoint_tensors: every file's hash checked) and
/// puts its ranks' weights together (any rank layout: data-parallel copies, FSDP shards, TP slices, pipeline
/// layers), with `moments` the optimizer state too. Throws CheckpointError naming the file and what is wrong,
/// also for a checkpoint of an older trainsim that does not record its layer split.
SavedModel read_saved_model(const std::string& dir, bool moments = false);

/// The layout of the whole model as one layer (embedding, every block, final norm and head).
LayerLayout whole_model_layout(const ModelConfig& model);

/// The whole model's flat buffer (whole_model_layout's P elements) from its named parameters. Throws
/// std::invalid_argument when a parameter is missing or has the wrong number of elements, naming it.
std::vector<float> flatten_parameters(const ModelConfig& model, const NamedParameters& params);

/// Mean cross-entropy (nats per token) of the model `flat` (flatten_parameters) over validation sequences
/// 0 .. sequences-1 (TokenData::validation_sequences: the held-out split, tiled in order), computed on the host
/// with the CPU kernels, microbatch_size sequences at a time. The same sequences whatever the schedule, ranks
/// and microbatches. Throws std::invalid_argument for sequences < 1.
double validation_loss(const ModelConfig& model, const std::vector<float>& flat, const class TokenData& data,
                       int sequences);

}  // namespace trainsim::exec
