#include "core/train/loss_scaler.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace ckpt {
namespace {

bool PositiveFinite(double x) { return x > 0 && std::isfinite(x); }

}  // namespace

absl::StatusOr<DynamicLossScaler> DynamicLossScaler::Create(const LossScalerOptions& options) {
  if (!PositiveFinite(options.initial_scale)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "loss scaler initial_scale=%g is not accepted; accepted: a positive finite number",
        options.initial_scale));
  }
  if (!PositiveFinite(options.min_scale) || options.min_scale > options.initial_scale) {
    return absl::InvalidArgumentError(
        absl::StrFormat("loss scaler min_scale=%g is not accepted; accepted: a positive number <= "
                        "initial_scale (%g)",
                        options.min_scale, options.initial_scale));
  }
  if (!(options.growth_factor > 1) || !std::isfinite(options.growth_factor)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "loss scaler growth_factor=%g is not accepted; accepted: a finite number > 1",
        options.growth_factor));
  }
  if (!(options.backoff_factor > 0 && options.backoff_factor < 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "loss scaler backoff_factor=%g is not accepted; accepted: a number in (0, 1)",
        options.backoff_factor));
  }
  if (options.growth_interval < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("loss scaler growth_interval=%d is not accepted; accepted: an integer >= 1",
                        options.growth_interval));
  }
  return DynamicLossScaler(options);
}

absl::StatusOr<bool> DynamicLossScaler::Update(bool gradients_finite) {
  if (!gradients_finite) {
    good_steps_ = 0;
    const double lowered = scale_ * options_.backoff_factor;
    if (lowered < options_.min_scale) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "gradients are non-finite at every loss scale down to %g (min_scale %g): the model "
          "has diverged, which loss scaling cannot fix",
          scale_, options_.min_scale));
    }
    scale_ = lowered;
    return false;
  }
  if (++good_steps_ == options_.growth_interval) {
    good_steps_ = 0;
    // Growth stops short of overflowing the scale itself (a double).
    if (std::isfinite(scale_ * options_.growth_factor)) scale_ *= options_.growth_factor;
  }
  return true;
}

}  // namespace ckpt
