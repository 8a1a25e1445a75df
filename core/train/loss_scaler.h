// Dynamic loss scaling for float16 training, as torch.cuda.amp.GradScaler does it.
//
// float16 cannot represent gradients below about 6e-8 (they flush to zero), so the loss is
// multiplied by a large scale before backward and the gradients divided by it before the
// optimizer step. A scale that is too large makes some gradient overflow to inf or NaN: that
// step is skipped and the scale halved. After `growth_interval` consecutive good steps the
// scale doubles again, so it tracks the largest scale the gradients tolerate.
//
// Unlike GradScaler this one gives up: a model whose gradients are non-finite at every scale
// down to `min_scale` has diverged (a NaN or inf that no scale can fix), and skipping every
// later step silently would report a flat loss curve as a result.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckpt {

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16, GradScaler's default
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 2000;      // good steps between growths
  double min_scale = 1.0 / 65536;  // 2^-16: 32 halvings below the initial scale
};

class DynamicLossScaler {
 public:
  // InvalidArgument naming the offending option: scales must be positive and finite with
  // min_scale <= initial_scale, growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1.
  static absl::StatusOr<DynamicLossScaler> Create(const LossScalerOptions& options);

  // The scale to multiply the next step's loss by.
  double scale() const { return scale_; }
  int good_steps() const { return good_steps_; }

  // Records whether the step's (scaled) gradients were all finite. Returns true if the
  // optimizer step should be taken, false if it must be skipped (the scale has been lowered).
  // FailedPrecondition, naming the scale reached, once lowering would go below min_scale.
  absl::StatusOr<bool> Update(bool gradients_finite);

 private:
  explicit DynamicLossScaler(const LossScalerOptions& options)
      : options_(options), scale_(options.initial_scale) {}

  LossScalerOptions options_;
  double scale_;
  int good_steps_ = 0;
};

}  // namespace ckpt
