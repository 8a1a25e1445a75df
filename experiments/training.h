// Training mode of the sweep (--train_steps): real optimizer steps under every strategy, to
// show that checkpointing changes memory and time but not the training trajectory.
//
// Each strategy trains a fresh copy of the model (same initialisation) with AdamW, gradient
// accumulation over micro-batches, gradient clipping and, optionally, mixed precision:
// bfloat16 autocast on CPU, float16 autocast with dynamic loss scaling on CUDA. Every step's
// loss is recorded and compared with store_all's curve.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/run/memory_meter.h"
#include "core/train/loss_scaler.h"
#include "experiments/sweep.h"

namespace ckpt {

struct TrainingOptions {
  int steps = 0;       // optimizer steps
  int accumulate = 1;  // micro-batches per optimizer step
  bool amp = false;    // mixed precision (see above)
  double learning_rate = 1e-3;
  double clip_norm = 1.0;  // gradient clipping (global L2 norm)
  // Dynamic loss scaling (core/train/loss_scaler.h). Unset: on exactly when training in
  // float16 (amp on CUDA). It can be forced on in float32, where scaling by powers of two is
  // exact, which is how the tests check it on CPU.
  std::optional<bool> loss_scaling;
  LossScalerOptions scaler;
};

struct LossCurve {
  std::string model;  // canonical specs
  std::string strategy;
  RowStatus status = RowStatus::kOk;  // kOk or a failure (then message)
  std::string message;
  std::vector<double> losses;        // one per optimizer step: the mean over its micro-batches
  double max_diff_vs_store_all = 0;  // max over steps of |loss - store_all's loss|, or NaN
  double tolerance = 0;              // what the comparison allowed (0: identical)
  int skipped_steps = 0;             // steps skipped for non-finite scaled gradients (loss scaling)
  bool reassociates = false;  // the plan sums in another order than store_all (Plan::Reassociates)
  // The curve departs from store_all's beyond its tolerance (then status is kError). A curve
  // that could not be compared (store_all's own failed, out of memory under a cap, say) does
  // not depart: its message says so, and max_diff_vs_store_all is NaN.
  bool departs = false;
};

// InvalidArgument for steps < 1, accumulate < 1 or bad scaler options (naming them).
absl::Status ValidateTraining(const TrainingOptions& options);

// The largest |a[i] - b[i]| over the steps of two equally long loss curves, where a NaN or
// inf loss counts as equal only to the same non-finite value: a curve that blows up where the
// other does not departs from it by inf (plain subtraction would give NaN, which compares
// as no departure at all).
double CurveDeparture(const std::vector<double>& a, const std::vector<double>& b);

// Trains every model under every strategy (store_all first). A curve that departs from
// store_all's by more than its tolerance is an error row: identical for plans that recompute
// the same arithmetic (RNG replay and counter-based dropout make it so, also under autocast,
// whose state checkpoints replay); for plans that reassociate sums (Plan::Reassociates: chunks,
// fused attention cores), 1e-3 of the loss in
// float32 and 2e-2 under mixed precision, because AdamW normalises every update, so a
// rounding-level difference in a near-zero gradient can move a weight by a full step. On CUDA
// every plan gets the reassociating plans' tolerance: some CUDA kernels (atomic adds in backward)
// are not bitwise deterministic, so store_all's own curve need not repeat to the bit, and the
// sweep does not ask for deterministic algorithms, which would change what it times.
absl::StatusOr<std::vector<LossCurve>> RunTraining(const SweepOptions& sweep,
                                                   const TrainingOptions& options,
                                                   MemoryMeter& meter, std::ostream& progress);

// The training section of report.md: per model, each strategy's final loss and its largest
// departure from store_all's curve; loss.png where some curve has a loss to draw.
std::string TrainingReport(const TrainingOptions& options, const std::vector<LossCurve>& curves);

// losses.csv (model,strategy,step,loss), loss.gp and, with gnuplot, loss.png. Unavailable, with
// the rest written, where no curve has a loss to draw (every one failed: the report says so).
absl::Status WriteLossCurves(const std::string& dir, const std::vector<LossCurve>& curves);

}  // namespace ckpt
