#include "core/plan/extrapolate.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ckpt {
namespace {

using Int = __int128;

// A count of a profile: where it is, for errors, and the transient it is, if one.
struct Count {
  int64_t* value = nullptr;
  std::string where;
  std::optional<PeakKey> peak;
};

template <typename Add>
void AddWork(Add& add, OpWork& work, const std::string& what) {
  add(work.matmul_flops, what + ": FLOPs");
  add(work.bytes, what + ": bytes moved");
  add(work.ops, what + ": operators");
}

// Every byte count of `p`, in a fixed order, and what must be alike between samples written out
// in `shape`.
std::vector<Count> CountsOf(ModelProfile& p, std::string& shape) {
  std::vector<Count> counts;
  auto add = [&](int64_t& value, std::string where, std::optional<PeakKey> peak = std::nullopt) {
    counts.push_back({&value, std::move(where), peak});
  };
  absl::StrAppend(&shape, p.stages.size(), "|", p.param_element_bytes, "|", p.autocast, "|",
                  p.menu_chunks, "|", p.input_storage_bytes.size(), "|",
                  p.kept_gradient_bytes.size(), "\n");
  add(p.input_bytes, "the batch's inputs");
  for (int64_t& b : p.input_storage_bytes) add(b, "a storage of the batch's inputs");
  add(p.target_bytes, "the batch's targets");
  add(p.param_bytes, "the parameters");
  for (auto& [param, bytes] : p.kept_gradient_bytes) add(bytes, "a kept gradient");
  for (size_t i = 0; i < p.measured.size(); ++i) {
    for (size_t m = 0; m < p.measured[i].size(); ++m) {
      StageProfile& s = p.measured[i][m];
      if (s.policy.RunsFused()) {  // left out: its scratch grows by blocks (Extrapolate)
        absl::StrAppend(&shape, i, ":", m, ":fused\n");
        continue;
      }
      const std::string policy = DescribePolicy(p.stages[i], s.policy);
      const std::string at =
          absl::StrCat("stage ", i, " (", p.stages[i].name, ") under '", policy, "': ");
      absl::StrAppend(&shape, i, ":", m, ":", policy, ";");
      for (const BoundaryStorage& o : s.outputs) absl::StrAppend(&shape, o.input, ",");
      absl::StrAppend(&shape, ";", absl::StrJoin(s.kept_inputs, ","), ";",
                      absl::StrJoin(s.kept_outputs, ","), ";");
      for (const auto& [param, bytes] : s.param_grads) absl::StrAppend(&shape, param, ",");
      absl::StrAppend(&shape, ";", s.param_grad_sums_in_place.size(), ";");
      for (const bool b : s.param_grad_sums_in_place) absl::StrAppend(&shape, b);
      absl::StrAppend(&shape, ";", absl::StrJoin(s.float32_ops, ","), "\n");
      const auto peak = [&](Transient t) {
        return PeakKey{static_cast<int>(i), static_cast<int>(m), t};
      };
      add(s.input_bytes, at + "input bytes");
      add(s.output_bytes, at + "output bytes");
      for (BoundaryStorage& o : s.outputs) add(o.bytes, at + "an output storage");
      add(s.retained_bytes, at + "retained bytes");
      add(s.forward_transient_bytes, at + "forward transient", peak(Transient::kForward));
      add(s.nograd_transient_bytes, at + "no-grad transient", peak(Transient::kNograd));
      for (auto& [param, bytes] : s.param_grads) add(bytes, at + "a parameter's gradient");
      add(s.input_grad_bytes, at + "input gradient");
      add(s.backward_transient_bytes, at + "backward transient", peak(Transient::kBackward));
      add(s.backward_input_held_transient_bytes, at + "backward transient, input held",
          peak(Transient::kBackwardInputHeld));
      add(s.backward_input_output_held_transient_bytes,
          at + "backward transient, input and output held",
          peak(Transient::kBackwardInputOutputHeld));
      add(s.backward_held_transient_bytes, at + "backward transient, all held",
          peak(Transient::kBackwardHeld));
      add(s.rng_state_bytes, at + "RNG state");
      AddWork(add, s.forward_work, at + "forward work");
      AddWork(add, s.nograd_work, at + "no-grad forward work");
      AddWork(add, s.backward_work, at + "backward work");
    }
  }
  LossProfile& l = p.loss;
  absl::StrAppend(&shape, "loss:", absl::StrJoin(l.kept_inputs, ","), "\n");
  add(l.retained_bytes, "the loss's retained bytes");
  add(l.output_bytes, "the loss's output");
  add(l.forward_transient_bytes, "the loss's forward transient",
      PeakKey{-1, 0, Transient::kLossForward});
  add(l.backward_transient_bytes, "the loss's backward transient",
      PeakKey{-1, 0, Transient::kLossBackward});
  add(l.backward_net_bytes, "the loss's backward net bytes");
  add(l.input_grad_bytes, "the loss's input gradient");
  AddWork(add, l.forward_work, "the loss's forward work");
  AddWork(add, l.backward_work, "the loss's backward work");
  return counts;
}

// x * y + z, or nullopt past __int128.
std::optional<Int> MulAdd(Int x, Int y, Int z) {
  Int product = 0, sum = 0;
  if (__builtin_mul_overflow(x, y, &product) || __builtin_add_overflow(product, z, &sum)) {
    return std::nullopt;
  }
  return sum;
}

// The polynomial of degree values.size() - 1 through values[k] at k = 0, 1, ..., at `n`:
// sum over k of C(n, k) times the k-th forward difference.
std::optional<Int> AtStep(std::vector<Int> values, int64_t n) {
  Int result = 0, binomial = 1;  // C(n, 0)
  for (size_t k = 0; k < values.size(); ++k) {
    if (k > 0) {
      for (size_t j = values.size() - 1; j >= k; --j) values[j] -= values[j - 1];
      // C(n, k) = C(n, k - 1) (n - k + 1) / k, exact at each step.
      std::optional<Int> next = MulAdd(binomial, n - static_cast<int64_t>(k) + 1, 0);
      if (!next.has_value()) return std::nullopt;
      binomial = *next / static_cast<Int>(k);
    }
    std::optional<Int> sum = MulAdd(binomial, values[k], result);
    if (!sum.has_value()) return std::nullopt;
    result = *sum;
  }
  return result;
}

// The tensor-product polynomial through `grid` (the samples' values in SamplePoints' order, the
// held-out one left out) at `steps`, the whole steps from each axis's first sample.
std::optional<int64_t> AtSteps(const std::vector<ScaleAxis>& axes, std::vector<Int> grid,
                               const std::vector<int64_t>& steps) {
  for (size_t a = axes.size(); a-- > 0;) {  // the last axis, which changes fastest, first
    const size_t points = axes[a].degree + 1;
    std::vector<Int> collapsed;
    for (size_t start = 0; start < grid.size(); start += points) {
      std::optional<Int> v =
          AtStep(std::vector<Int>(grid.begin() + start, grid.begin() + start + points), steps[a]);
      if (!v.has_value()) return std::nullopt;
      collapsed.push_back(*v);
    }
    grid = std::move(collapsed);
  }
  if (grid.size() != 1 || grid[0] > std::numeric_limits<int64_t>::max() ||
      grid[0] < std::numeric_limits<int64_t>::min()) {
    return std::nullopt;
  }
  return static_cast<int64_t>(grid[0]);
}

std::string PointText(const std::vector<ScaleAxis>& axes, const std::vector<int64_t>& point) {
  std::vector<std::string> parts;
  for (size_t a = 0; a < axes.size(); ++a)
    parts.push_back(absl::StrCat(axes[a].param, "=", point[a]));
  return absl::StrJoin(parts, ":");
}

// The bytes a stage keeps with every part stored: what its time scales by where it declares no
// FLOPs.
int64_t StoredActivationBytes(const ModelProfile& p, int stage) {
  const StageProfile& s = p.Stored(stage);
  return s.retained_bytes + s.output_bytes;
}

double TargetOverSample(double target, double sample) {
  return sample > 0 && target > 0 ? target / sample : 1;
}

}  // namespace

std::vector<ScaleAxis> ScaleAxes(const std::vector<ParamDef>& defs, const ParamValues& values,
                                 int chunks) {
  std::vector<ScaleAxis> axes;
  for (const ParamDef& def : defs) {
    if (def.scale_degree <= 0 || def.type != ParamDef::Type::kInt || values.IsAuto(def.key)) {
      continue;
    }
    ScaleAxis axis;
    axis.param = def.key;
    axis.degree = def.scale_degree;
    axis.step = def.scale_unit * std::max(chunks, 1);
    axis.target = values.Int(def.key);
    if (axis.target % def.scale_unit != 0) continue;  // off the unit: not a polynomial there
    axis.first = axis.target % axis.step;
    while (axis.first < 4 * axis.step) axis.first += axis.step;
    if (axis.first + (axis.degree + 1) * axis.step >= axis.target) continue;
    axes.push_back(axis);
  }
  return axes;
}

std::vector<std::vector<int64_t>> SamplePoints(const std::vector<ScaleAxis>& axes) {
  std::vector<std::vector<int64_t>> points = {{}};
  for (const ScaleAxis& axis : axes) {
    std::vector<std::vector<int64_t>> next;
    for (const std::vector<int64_t>& point : points) {
      for (int k = 0; k <= axis.degree; ++k) {
        next.push_back(point);
        next.back().push_back(axis.first + k * axis.step);
      }
    }
    points = std::move(next);
  }
  std::vector<int64_t> held_out;
  for (const ScaleAxis& axis : axes) held_out.push_back(axis.first + (axis.degree + 1) * axis.step);
  points.push_back(held_out);
  return points;
}

absl::StatusOr<ModelProfile> Extrapolate(const std::vector<ScaleAxis>& axes,
                                         const std::vector<ProfileSample>& samples,
                                         std::string model, std::vector<StageInfo> stages) {
  const std::vector<std::vector<int64_t>> points = SamplePoints(axes);
  if (axes.empty() || samples.size() != points.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Extrapolate: ", samples.size(), " samples for ", points.size(), " points"));
  }
  const ProfileSample& held_out = samples.back();
  std::vector<ModelProfile> copies;
  std::vector<std::vector<Count>> counts;
  std::string first_shape;
  for (size_t s = 0; s < samples.size(); ++s) {
    copies.push_back(samples[s].profile);
  }
  for (size_t s = 0; s < samples.size(); ++s) {
    std::string shape;
    counts.push_back(CountsOf(copies[s], shape));
    if (s == 0) {
      first_shape = shape;
    } else if (shape != first_shape) {
      const size_t at =
          std::mismatch(shape.begin(), shape.end(), first_shape.begin(), first_shape.end()).first -
          shape.begin();
      const size_t line = shape.rfind('\n', at == 0 ? 0 : at - 1);
      const std::string context = shape.substr(line == std::string::npos ? 0 : line + 1, 80);
      return absl::FailedPreconditionError(absl::StrCat(
          "the profiles at ", PointText(axes, points[0]), " and ", PointText(axes, points[s]),
          " differ in what they measured, not only in bytes (near '", context,
          "'); not extrapolated"));
    }
    // Each transient's window made as many allocations at every sample.
    for (const Count& count : counts.front()) {
      if (!count.peak.has_value()) continue;
      const auto first = samples.front().peaks.find(*count.peak);
      const auto here = samples[s].peaks.find(*count.peak);
      const size_t n = first == samples.front().peaks.end() ? 0 : first->second.size();
      const size_t m = here == samples[s].peaks.end() ? 0 : here->second.size();
      if (n != m) {
        return absl::FailedPreconditionError(
            absl::StrCat(count.where, ": its window made ", n, " allocations at ",
                         PointText(axes, points[0]), " and ", m, " at ", PointText(axes, points[s]),
                         " (a kernel that allocates by size); not extrapolated"));
      }
    }
    if (samples[s].peaks.size() != samples.front().peaks.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the profiles at ", PointText(axes, points[0]), " and ", PointText(axes, points[s]),
          " traced different transients; not extrapolated"));
    }
  }
  const ModelProfile& sample = held_out.profile;
  if (stages.size() != sample.stages.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Extrapolate: ", model, " has ", stages.size(),
                                                   " stages, the samples ", sample.stages.size()));
  }
  std::vector<int64_t> to_target, to_held_out;
  for (const ScaleAxis& axis : axes) {
    if ((axis.target - axis.first) % axis.step != 0 || axis.target < axis.first) {
      return absl::InvalidArgumentError(absl::StrCat("Extrapolate: ", axis.param, "=", axis.target,
                                                     " is not a step from ", axis.first));
    }
    to_target.push_back((axis.target - axis.first) / axis.step);
    to_held_out.push_back(axis.degree + 1);
  }
  const size_t grid = samples.size() - 1;
  const std::string held_out_at = PointText(axes, points.back());
  // One polynomial, through the grid's `values`: checked at the held-out point, where
  // `measured` is, and evaluated at the target.
  auto extrapolate = [&](const std::vector<Int>& values, int64_t measured,
                         const std::string& what) -> absl::StatusOr<int64_t> {
    const std::optional<int64_t> there = AtSteps(axes, values, to_held_out);
    if (!there.has_value() || *there != measured) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": measured ", measured, " at ", held_out_at, ", extrapolated ",
                       there.has_value() ? absl::StrCat(*there) : std::string("past int64"),
                       " from the smaller samples; not extrapolated"));
    }
    const std::optional<int64_t> at_target = AtSteps(axes, values, to_target);
    if (!at_target.has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": its extrapolation overflows int64"));
    }
    return *at_target;
  };
  ModelProfile out = held_out.profile;
  std::string unused;
  std::vector<Count> out_counts = CountsOf(out, unused);
  for (size_t c = 0; c < out_counts.size(); ++c) {
    const Count& count = out_counts[c];
    const auto traced = count.peak.has_value() ? samples.front().peaks.find(*count.peak)
                                               : samples.front().peaks.end();
    if (traced == samples.front().peaks.end()) {
      std::vector<Int> values;
      for (size_t s = 0; s < grid; ++s) values.push_back(*counts[s][c].value);
      absl::StatusOr<int64_t> v = extrapolate(values, *counts[grid][c].value, count.where);
      if (!v.ok()) return v.status();
      *count.value = *v;
      continue;
    }
    // A transient: the largest of its candidates at the target, each extrapolated.
    int64_t largest = std::numeric_limits<int64_t>::min();
    for (size_t k = 0; k < traced->second.size(); ++k) {
      std::vector<Int> values;
      for (size_t s = 0; s < grid; ++s) values.push_back(samples[s].peaks.at(*count.peak)[k]);
      absl::StatusOr<int64_t> v = extrapolate(values, held_out.peaks.at(*count.peak)[k],
                                              absl::StrCat(count.where, ", its allocation ", k));
      if (!v.ok()) return v.status();
      largest = std::max(largest, *v);
    }
    *count.value = largest;
  }
  // Times, scaled from the held-out sample's.
  for (size_t i = 0; i < out.measured.size(); ++i) {
    const int stage = static_cast<int>(i);
    const double ratio =
        stages[i].forward_flops > 0 && sample.stages[i].forward_flops > 0
            ? TargetOverSample(stages[i].forward_flops, sample.stages[i].forward_flops)
            : TargetOverSample(StoredActivationBytes(out, stage),
                               StoredActivationBytes(sample, stage));
    for (StageProfile& p : out.measured[i]) {
      p.SetCostBytes();
      p.costs.forward_ms *= ratio;
      p.costs.nograd_forward_ms *= ratio;
      p.costs.backward_ms *= ratio;
    }
  }
  const int64_t loss_input_target =
      out.measured.empty() ? out.input_bytes : out.Stored(out.num_stages() - 1).output_bytes;
  const int64_t loss_input_sample = sample.measured.empty()
                                        ? sample.input_bytes
                                        : sample.Stored(sample.num_stages() - 1).output_bytes;
  const double loss_ratio = TargetOverSample(loss_input_target, loss_input_sample);
  out.loss.forward_ms *= loss_ratio;
  out.loss.backward_ms *= loss_ratio;
  std::vector<std::string> described;
  for (const ScaleAxis& axis : axes) {
    described.push_back(absl::StrCat(axis.param, "=", axis.first, "..",
                                     axis.first + (axis.degree + 1) * axis.step, " in steps of ",
                                     axis.step));
  }
  out.extrapolated = absl::StrJoin(described, ", ");
  bool left_out = false;
  for (std::vector<StageProfile>& menu : out.measured) {
    const auto fused = std::remove_if(menu.begin(), menu.end(),
                                      [](const StageProfile& s) { return s.policy.RunsFused(); });
    left_out = left_out || fused != menu.end();
    menu.erase(fused, menu.end());
  }
  if (left_out) absl::StrAppend(&out.extrapolated, " (fused attention cores left out)");
  out.model = std::move(model);
  out.stages = std::move(stages);
  return out;
}

}  // namespace ckpt
