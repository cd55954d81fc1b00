#include "engine_host/step_time_fit.h"

#include <algorithm>
#include <cmath>

namespace gecd::engine_host {

StepTimeFit::StepTimeFit(double half_life_steps) : decay_(std::exp2(-1.0 / half_life_steps)) {}

void StepTimeFit::Observe(int sequences, int positions, double step_us) {
  const double n = sequences;
  const double m = std::max(0, positions - sequences);
  w_ = w_ * decay_ + 1;
  n_ = n_ * decay_ + n;
  m_ = m_ * decay_ + m;
  nn_ = nn_ * decay_ + n * n;
  mm_ = mm_ * decay_ + m * m;
  nm_ = nm_ * decay_ + n * m;
  t_ = t_ * decay_ + step_us;
  nt_ = nt_ * decay_ + n * step_us;
  mt_ = mt_ * decay_ + m * step_us;
}

StepTimeFit::Fit StepTimeFit::Solve() const {
  Fit fit;
  if (w_ <= 0) return fit;
  const double mean_n = n_ / w_, mean_m = m_ / w_, mean_t = t_ / w_;
  // Covariances of the recent steps.
  const double vnn = nn_ / w_ - mean_n * mean_n;
  const double vmm = mm_ / w_ - mean_m * mean_m;
  const double vnm = nm_ / w_ - mean_n * mean_m;
  const double vnt = nt_ / w_ - mean_n * mean_t;
  const double vmt = mt_ / w_ - mean_m * mean_t;
  // Below a spread of one sequence (or one position) a slope is mostly noise; extra positions
  // that rise and fall with the sequences (correlation above 0.99) cannot be told apart from
  // them, and are left to the per-sequence part, as before they were counted.
  const bool n_varies = vnn >= 1.0;
  const bool m_varies = vmm >= 1.0 && (!n_varies || vnm * vnm < 0.98 * vnn * vmm);
  if (n_varies && m_varies) {
    const double det = vnn * vmm - vnm * vnm;
    fit.per_sequence = (vnt * vmm - vmt * vnm) / det;
    fit.per_extra = (vmt * vnn - vnt * vnm) / det;
  } else if (m_varies) {
    fit.per_extra = vmt / vmm;
  } else if (n_varies) {
    fit.per_sequence = vnt / vnn;
  }
  // No part is negative: a step never gets faster with more work, nor costs less than nothing.
  // A slope clamped to zero gives its share back to the other one, fitted alone.
  if (fit.per_extra < 0 || !m_varies) {
    fit.per_extra = 0;
    if (n_varies) fit.per_sequence = vnt / vnn;
  }
  if (fit.per_sequence < 0 || !n_varies) {
    fit.per_sequence = 0;
    if (m_varies) fit.per_extra = std::max(0.0, vmt / vmm);
  }
  const double decoding_t = mean_t - fit.per_extra * mean_m;  // the mean step without extras
  if (!n_varies) {
    // An unvaried batch: the decoding step split in half between the two parts.
    fit.per_sequence = mean_n > 0 ? 0.5 * decoding_t / mean_n : 0;
  }
  fit.per_sequence =
      std::clamp(fit.per_sequence, 0.0, mean_n > 0 ? std::max(0.0, decoding_t) / mean_n : 0.0);
  fit.fixed = std::max(0.0, decoding_t - fit.per_sequence * mean_n);
  return fit;
}

ipc::StepTime StepTimeFit::Fitted() const {
  const Fit fit = Solve();
  return {.fixed_us = static_cast<float>(fit.fixed),
          .per_sequence_us = static_cast<float>(fit.per_sequence)};
}

double StepTimeFit::per_extra_token_us() const { return Solve().per_extra; }

}  // namespace gecd::engine_host
