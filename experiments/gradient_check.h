// The gradient check every sweep row passes before it says ok: each configuration's gradients
// against store_all's on one more seeded step, from the same state, in the run's dtype and, where
// a plan sums in another order than store_all's, exactly on float64 twins of the model.
#pragma once

#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "c10/core/DefaultDtype.h"
#include "core/plan/plan.h"
#include "core/run/executor.h"
#include "core/run/memory_meter.h"
#include "core/run/workload.h"
#include "experiments/records/cohort.h"
#include "experiments/records/results.h"
#include "experiments/sweep_options.h"

namespace ckpt {

// max |a - b| over paired gradients; infinity when one is undefined where the other is not,
// when their shapes differ, or where one holds a NaN or inf that the other does not.
double MaxGradientDifference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b);

// The largest |g| over `grads` (empty and undefined ones have none).
double LargestMagnitude(const std::vector<at::Tensor>& grads);

// Sets LibTorch's default dtype for a scope (parameters, batches and every factory without an
// explicit dtype follow it): a model built inside is made in it.
class ScopedDefaultDtype {
 public:
  explicit ScopedDefaultDtype(caffe2::TypeMeta dtype) : saved_(c10::get_default_dtype()) {
    c10::set_default_dtype(dtype);
  }
  ~ScopedDefaultDtype() { c10::set_default_dtype(saved_); }
  ScopedDefaultDtype(const ScopedDefaultDtype&) = delete;
  ScopedDefaultDtype& operator=(const ScopedDefaultDtype&) = delete;

 private:
  caffe2::TypeMeta saved_;
};

// A configuration as the check sees it: its executor (none where it failed already; its row
// says why) and its row, whose check columns the check fills.
struct CheckedConfig {
  ChainExecutor* executor = nullptr;
  ConfigResult* row = nullptr;
};

// Every configuration's gradients against store_all's (configs[0]), one more seeded step each,
// every step from the model's state as it was before the first. Run after the measurements, so
// that the reference copy never inflates anyone's memory figures, and outside the measured cap,
// which it would count against: store_all's reference step runs even where store_all's own
// configuration did not fit the cap. With a group, each step has a reducer of its own (its first
// step reduces after backward), so the gradients compared are the ranks' mean, and the
// difference is the largest rank's.
//
// A row stays ok only when its gradients were compared and agree, and says what with
// (ConfigResult::grad_check): in the run's dtype, within float32 rounding of the largest
// gradient (the same arithmetic as store_all's is exactly equal on a CPU); and where the plan
// sums in another order (chunks, a fused kernel) and under autocast, or where that rounding is
// exceeded, on the float64 twins (Float64Twin). A comparison that cannot run is the row's error.
// `configs[0]` is store_all's, and `store_all` its plan (empty where it was not planned). An
// error only when ranks cannot go on together.
absl::Status CheckGradients(const SweepOptions& options, const Cohort& cohort, Workload& workload,
                            MemoryMeter& meter, const Plan& store_all,
                            const std::vector<CheckedConfig>& configs);

}  // namespace ckpt
