// Colours of the timeline: one hue per layer (green to red, as the puzzles draw), lighter for backward.
#pragma once

#include <string>

namespace trainsim::visualize {

/// Fill colour of forward ops of `layer` out of `layers`, as "#rrggbb".
std::string layer_colour(int layer, int layers);
/// The same hue mixed with white by `amount` in [0, 1].
std::string lighten(const std::string& hex, double amount);

}  // namespace trainsim::visualize
