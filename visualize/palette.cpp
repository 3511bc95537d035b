#include "visualize/palette.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace trainsim::visualize {

namespace {
struct Rgb {
  double r, g, b;
};
Rgb hsv(double h, double s, double v) {
  double c = v * s, x = c * (1 - std::fabs(std::fmod(h / 60.0, 2) - 1)), m = v - c;
  Rgb p{0, 0, 0};
  if (h < 60) p = {c, x, 0};
  else if (h < 120) p = {x, c, 0};
  else if (h < 180) p = {0, c, x};
  else if (h < 240) p = {0, x, c};
  else if (h < 300) p = {x, 0, c};
  else p = {c, 0, x};
  return {p.r + m, p.g + m, p.b + m};
}
std::string hex(Rgb c) {
  auto q = [](double v) { return static_cast<int>(std::lround(std::clamp(v, 0.0, 1.0) * 255)); };
  return fmt::format("#{:02x}{:02x}{:02x}", q(c.r), q(c.g), q(c.b));
}
}  // namespace

std::string layer_colour(int layer, int layers) {
  // Green (120°) for the first layer to red (0°) for the last, as the puzzles' timeline.
  if (layers > 0) layer = std::clamp(layer, 0, layers - 1);
  double f = layers <= 1 || layer < 0 ? 0.0 : static_cast<double>(layer) / (layers - 1);
  return hex(hsv(120.0 * (1.0 - f), 0.75, 0.85));
}

std::string lighten(const std::string& h, double amount) {
  unsigned r = 0, g = 0, b = 0;
  if (h.size() == 7) {
    r = std::stoul(h.substr(1, 2), nullptr, 16);
    g = std::stoul(h.substr(3, 2), nullptr, 16);
    b = std::stoul(h.substr(5, 2), nullptr, 16);
  }
  auto mix = [&](unsigned c) { return (c / 255.0) * (1 - amount) + amount; };
  return hex({mix(r), mix(g), mix(b)});
}

std::string backward_colour(int layer, int layers) { return lighten(layer_colour(layer, layers), 0.45); }
std::string backward_input_colour(int layer, int layers) { return lighten(layer_colour(layer, layers), 0.3); }
std::string backward_weight_colour(int layer, int layers) { return lighten(layer_colour(layer, layers), 0.62); }

// The first layer's (green): the middle layer's hue is yellow, too close to the update's.
std::string summary_forward_colour(int layers) { return layer_colour(0, std::max(layers, 1)); }
std::string summary_backward_colour(int layers) { return backward_colour(0, std::max(layers, 1)); }

}  // namespace trainsim::visualize
