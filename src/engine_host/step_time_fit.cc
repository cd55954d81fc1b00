#include "engine_host/step_time_fit.h"

#include <algorithm>
#include <cmath>

namespace gecd::engine_host {

StepTimeFit::StepTimeFit(double half_life_steps) : decay_(std::exp2(-1.0 / half_life_steps)) {}

void StepTimeFit::Observe(int sequences, double step_us) {
  const double n = sequences;
  w_ = w_ * decay_ + 1;
  n_ = n_ * decay_ + n;
  nn_ = nn_ * decay_ + n * n;
  t_ = t_ * decay_ + step_us;
  nt_ = nt_ * decay_ + n * step_us;
}

ipc::StepTime StepTimeFit::Fitted() const {
  if (w_ <= 0) return {};
  const double mean_n = n_ / w_;
  const double mean_t = t_ / w_;
  const double variance_n = nn_ / w_ - mean_n * mean_n;
  double per_sequence = 0;
  // Below a spread of one sequence the slope is mostly noise.
  if (variance_n >= 1.0) {
    per_sequence = (nt_ / w_ - mean_n * mean_t) / variance_n;
  } else {
    per_sequence = mean_n > 0 ? 0.5 * mean_t / mean_n : 0;
  }
  // Neither part is negative: a step never gets faster with more sequences, nor costs less than
  // nothing when it runs none.
  per_sequence = std::clamp(per_sequence, 0.0, mean_n > 0 ? mean_t / mean_n : 0.0);
  const double fixed = std::max(0.0, mean_t - per_sequence * mean_n);
  return {.fixed_us = static_cast<float>(fixed),
          .per_sequence_us = static_cast<float>(per_sequence)};
}

}  // namespace gecd::engine_host
