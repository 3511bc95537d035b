// Colours of the timeline: one hue per layer (green to red, as the puzzles draw), lighter for backward.
#pragma once

#include <string>

namespace trainsim::visualize {

/// Fill colour of forward ops of `layer` out of `layers`, as "#rrggbb". `layer` is clamped to [0, layers-1].
std::string layer_colour(int layer, int layers);
/// The same hue mixed with white by `amount` in [0, 1].
std::string lighten(const std::string& hex, double amount);

/// Full backward of `layer`: the forward hue, lighter.
std::string backward_colour(int layer, int layers);
/// Backward, input-grad half ("I"): a little darker than a full backward.
std::string backward_input_colour(int layer, int layers);
/// Backward, weight-grad half ("W"): lighter than a full backward.
std::string backward_weight_colour(int layer, int layers);

/// Fixed colours of the other parts of the timeline.
inline constexpr const char* kUpdateColour = "#f2c81f";      ///< optimizer update (yellow, as the puzzles)
inline constexpr const char* kPassColour = "#a6a6a6";        ///< send / recv ("pass")
inline constexpr const char* kLossColour = "#262626";        ///< loss marker
inline constexpr const char* kNoLayerColour = "#8c7bb8";     ///< collectives without a layer (barrier)
/// Collectives have their own colours (blues and violets, away from the layers' green-to-red hues), so an
/// all-reduce never looks like a backward; their label names the layer.
inline constexpr const char* kAllGatherColour = "#4aa3d8";     ///< all-gather (AG)
inline constexpr const char* kReduceScatterColour = "#a77fe0"; ///< reduce-scatter (RS)
inline constexpr const char* kAllReduceColour = "#5a64d0";     ///< all-reduce (AR)
inline constexpr const char* kBroadcastColour = "#3cc0c8";     ///< broadcast (BC), in the legend only when drawn
inline constexpr const char* kReduceColour = "#7a3fb0";        ///< reduce (RD), in the legend only when drawn
/// Expert parallelism's all-to-all (A2A: the dispatch and combine of an MoE layer's tokens), in the legend only when
/// drawn.
inline constexpr const char* kAllToAllColour = "#2f8f6f";
/// Tensor-parallel collectives (is_tp_collective: the all-reduce of a layer's partial sums, sequence
/// parallelism's reduce-scatter and all-gather of activations) in magenta, apart from the data-parallel ones.
inline constexpr const char* kTpCollectiveColour = "#c8379b";
inline constexpr const char* kMemoryFill = "#6b9be0";        ///< memory step plot, filled at kMemoryOpacity
inline constexpr const char* kMemoryStroke = "#2f5fa8";      ///< memory step plot outline
inline constexpr const char* kPeakColour = "#d62728";        ///< peak memory marker
inline constexpr const char* kTargetColour = "#404040";      ///< target time / memory (dashed)
inline constexpr const char* kExposedColour = "#e8400c";     ///< exposed communication strips (red-orange)
/// Summary rows (many ranks) use the detailed view's colours: forward and backward of the first layer
/// (green; the middle layer's yellow would read as update), update, all-reduce for every collective,
/// send/recv.
std::string summary_forward_colour(int layers);
/// Backward in summary rows: the backward colour of the first layer.
std::string summary_backward_colour(int layers);

}  // namespace trainsim::visualize
