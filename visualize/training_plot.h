// The curves of a training run (`trainsim replay --plot F.svg`): the training loss of every step and the
// validation loss where the model was evaluated, against steps (top panel), and the learning rate of every
// step (bottom panel, the same step axis). Axes carry their units (loss in nats per token, the learning rate
// as AdamW's step size, steps counted from 1); ticks are round numbers. Deterministic: the same run gives the same
// bytes.
#pragma once

#include <string>
#include <vector>

namespace trainsim::visualize {

/// One point of a curve: the step (1-based) and its value.
struct CurvePoint {
  double step = 0;
  double value = 0;
};

/// What the plot shows.
struct TrainingCurves {
  std::string title;                   ///< heading, e.g. "1f1b.sched - small: 4 blocks, dim 256 ... - 20 steps"
  std::vector<CurvePoint> train_loss;  ///< one per step
  std::vector<CurvePoint> val_loss;    ///< one per evaluation (may be empty)
  std::vector<CurvePoint> learning_rate;  ///< one per step
  std::string note;                    ///< a line under the title (data, clipping, ...), may be empty
};

/// The SVG text of the plot. Non-finite values are left out of the curves (a diverged step). An empty
/// curve draws its panel with axes and no line.
std::string training_plot_svg(const TrainingCurves& curves);

/// Round tick values covering [lo, hi], about `count` of them (1, 2 or 5 times a power of ten apart).
std::vector<double> nice_ticks(double lo, double hi, int count);

}  // namespace trainsim::visualize
