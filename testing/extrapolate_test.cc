// Extrapolated profiles (core/plan/extrapolate.h), on generated polynomials:
//   - the axes: every target a whole number of steps past the held-out sample, steps whole
//     units times the chunks;
//   - counts and transients that are polynomials of the declared degrees at the samples come out
//     exact at the target, a transient the largest of its candidates there even where another
//     candidate was the largest at every sample;
//   - a held-out sample off its extrapolation, samples that measured different things, and a
//     count past int64 are refused by name, never a wrong profile.
// Every model family against profiles measured at the target: extrapolate_model_test.
#include "core/plan/extrapolate.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace ckpt {
namespace {

// A polynomial in the axes' values: coefficients of value^k for each axis's k up to its degree,
// as a tensor product (the last axis fastest, as SamplePoints lays the grid out).
struct Polynomial {
  std::vector<int64_t> coefficients;
  int64_t At(const std::vector<ScaleAxis>& axes, const std::vector<int64_t>& point) const {
    int64_t sum = 0;
    for (size_t c = 0; c < coefficients.size(); ++c) {
      int64_t term = coefficients[c];
      size_t rest = c;
      for (size_t a = axes.size(); a-- > 0;) {
        const int power = static_cast<int>(rest % (axes[a].degree + 1));
        rest /= axes[a].degree + 1;
        for (int k = 0; k < power; ++k) term *= point[a];
      }
      sum += term;
    }
    return sum;
  }
};

rc::Gen<Polynomial> GenPolynomial(const std::vector<ScaleAxis>& axes) {
  size_t terms = 1;
  for (const ScaleAxis& axis : axes) terms *= axis.degree + 1;
  return rc::gen::construct<Polynomial>(
      rc::gen::container<std::vector<int64_t>>(terms, rc::gen::inRange<int64_t>(-64, 4096)));
}

// One or two axes, of degrees 1 to 3 (2 for a second), with targets up to a few hundred: every
// term fits int64.
rc::Gen<std::vector<ScaleAxis>> GenAxes() {
  return rc::gen::exec([] {
    std::vector<ScaleAxis> axes;
    const int n = *rc::gen::inRange(1, 3);
    for (int a = 0; a < n; ++a) {
      ScaleAxis axis;
      axis.param = a == 0 ? "batch" : "seq";
      axis.degree = *rc::gen::inRange(1, a == 0 ? 4 : 3);
      axis.step = *rc::gen::inRange<int64_t>(1, 9);
      axis.first = axis.step * *rc::gen::inRange<int64_t>(1, 4);
      axis.target = axis.first + axis.step * *rc::gen::inRange<int64_t>(axis.degree + 2, 60);
      axes.push_back(axis);
    }
    return axes;
  });
}

std::vector<StageInfo> Stages() {
  StageInfo stage;
  stage.name = "block";
  return {stage};
}

// A profile of one stage measured under one policy, its counts set by `value`, and its forward
// transient traced with candidates set by `candidate` (their largest, as the meter's peak).
ProfileSample SampleWith(const std::function<int64_t(int)>& value,
                         const std::vector<std::function<int64_t()>>& candidates) {
  ProfileSample sample;
  ModelProfile& p = sample.profile;
  p.model = "m";
  p.stages = Stages();
  StageProfile s;
  s.input_bytes = value(0);
  s.output_bytes = value(1);
  s.outputs = {BoundaryStorage{s.output_bytes, -1}};
  s.retained_bytes = value(2);
  s.backward_transient_bytes = value(3);  // untraced: a plain count
  s.param_grads = {{0, value(4)}};
  std::vector<int64_t> traced;
  for (const auto& c : candidates) traced.push_back(c());
  s.forward_transient_bytes = *std::max_element(traced.begin(), traced.end());
  sample.peaks[PeakKey{0, 0, Transient::kForward}] = traced;
  p.measured = {{s}};
  p.input_bytes = value(5);
  p.loss.retained_bytes = value(6);
  return sample;
}

std::vector<ProfileSample> Samples(const std::vector<ScaleAxis>& axes,
                                   const std::vector<Polynomial>& counts,
                                   const std::vector<Polynomial>& candidates) {
  std::vector<ProfileSample> samples;
  for (const std::vector<int64_t>& point : SamplePoints(axes)) {
    std::vector<std::function<int64_t()>> traced;
    for (const Polynomial& c : candidates)
      traced.push_back([&, point] { return c.At(axes, point); });
    samples.push_back(SampleWith([&](int k) { return counts[k].At(axes, point); }, traced));
  }
  return samples;
}

std::vector<int64_t> Targets(const std::vector<ScaleAxis>& axes) {
  std::vector<int64_t> t;
  for (const ScaleAxis& axis : axes) t.push_back(axis.target);
  return t;
}

RC_GTEST_PROP(Extrapolate, AxesPutTheTargetWholeStepsPastTheHeldOutSample, ()) {
  const int64_t unit = *rc::gen::inRange<int64_t>(1, 33);
  const int chunks = *rc::gen::inRange(1, 9);
  const int degree = *rc::gen::inRange(1, 5);
  const int64_t value = unit * *rc::gen::inRange<int64_t>(1, 2000);
  Spec spec{"m", {{"seq", std::to_string(value)}}};
  const std::vector<ParamDef> defs = {IntParam("seq", "1", "").Min(1).Scales(degree, unit)};
  const ParamValues values = *BindParams(spec, defs);
  const std::vector<ScaleAxis> axes = ScaleAxes(defs, values, chunks);
  if (axes.empty()) {
    // Only a value too small for samples below it is measured as asked.
    RC_ASSERT(value <= 5 * unit * chunks + (degree + 1) * unit * chunks);
    return;
  }
  const ScaleAxis& a = axes.front();
  RC_ASSERT(a.step == unit * chunks);
  RC_ASSERT(a.first >= 4 * a.step && a.first < 5 * a.step);
  RC_ASSERT(a.first % unit == 0);
  RC_ASSERT((a.target - a.first) % a.step == 0);
  RC_ASSERT(a.first + (a.degree + 1) * a.step < a.target);
  const std::vector<std::vector<int64_t>> points = SamplePoints(axes);
  RC_ASSERT(points.size() == static_cast<size_t>(degree + 2));
  RC_ASSERT(points.back().front() == a.first + (degree + 1) * a.step);
}

RC_GTEST_PROP(Extrapolate, PolynomialCountsAndTheLargestCandidateComeOutExact, ()) {
  const std::vector<ScaleAxis> axes = *GenAxes();
  std::vector<Polynomial> counts, candidates;
  for (int k = 0; k < 7; ++k) counts.push_back(*GenPolynomial(axes));
  const int n = *rc::gen::inRange(1, 5);
  for (int k = 0; k < n; ++k) candidates.push_back(*GenPolynomial(axes));
  const std::vector<ProfileSample> samples = Samples(axes, counts, candidates);
  const absl::StatusOr<ModelProfile> out = Extrapolate(axes, samples, "m:big", Stages());
  if (!out.ok()) RC_FAIL(std::string(out.status().message()));
  const std::vector<int64_t> target = Targets(axes);
  const StageProfile& s = out->measured[0][0];
  RC_ASSERT(s.input_bytes == counts[0].At(axes, target));
  RC_ASSERT(s.output_bytes == counts[1].At(axes, target));
  RC_ASSERT(s.outputs[0].bytes == counts[1].At(axes, target));
  RC_ASSERT(s.retained_bytes == counts[2].At(axes, target));
  RC_ASSERT(s.backward_transient_bytes == counts[3].At(axes, target));
  RC_ASSERT(s.param_grads[0].second == counts[4].At(axes, target));
  RC_ASSERT(out->input_bytes == counts[5].At(axes, target));
  RC_ASSERT(out->loss.retained_bytes == counts[6].At(axes, target));
  int64_t largest = candidates[0].At(axes, target);
  for (const Polynomial& c : candidates) largest = std::max(largest, c.At(axes, target));
  RC_ASSERT(s.forward_transient_bytes == largest);
  RC_ASSERT(s.costs.kept_bytes == s.retained_bytes + s.output_bytes);
  RC_ASSERT(out->model == "m:big");
}

TEST(Extrapolate, APeakWhoseLargestTermChangesPastTheSamplesIsExact) {
  // A parameter-sized gradient (constant) is the peak at every sample; logits growing with the
  // batch pass it at the target.
  const std::vector<ScaleAxis> axes = {{"batch", 1, 8, 4, 400}};
  const std::vector<Polynomial> counts(7, Polynomial{{0, 1}});
  const std::vector<Polynomial> candidates = {Polynomial{{100000, 0}}, Polynomial{{0, 1000}}};
  const std::vector<ProfileSample> samples = Samples(axes, counts, candidates);
  for (const ProfileSample& s : samples) {
    EXPECT_EQ(s.profile.measured[0][0].forward_transient_bytes, 100000);
  }
  const absl::StatusOr<ModelProfile> out = Extrapolate(axes, samples, "m", Stages());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->measured[0][0].forward_transient_bytes, 400000);
}

TEST(Extrapolate, AHeldOutSampleOffItsExtrapolationIsRefusedByName) {
  const std::vector<ScaleAxis> axes = {{"seq", 2, 8, 4, 1024}};
  const std::vector<Polynomial> counts(7, Polynomial{{3, 2, 1}});
  std::vector<ProfileSample> samples = Samples(axes, counts, {Polynomial{{1, 1, 1}}});
  samples.back().profile.measured[0][0].retained_bytes += 64;  // a buffer only larger sizes take
  const absl::StatusOr<ModelProfile> out = Extrapolate(axes, samples, "m", Stages());
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "stage 0 (block)")) << out.status();
  EXPECT_TRUE(absl::StrContains(out.status().message(), "retained bytes")) << out.status();
  EXPECT_TRUE(absl::StrContains(out.status().message(), "seq=20")) << out.status();

  samples = Samples(axes, counts, {Polynomial{{1, 1, 1}}});
  samples.back().peaks.begin()->second[0] += 1;
  EXPECT_FALSE(Extrapolate(axes, samples, "m", Stages()).ok());
}

TEST(Extrapolate, SamplesThatMeasuredDifferentThingsAreRefused) {
  const std::vector<ScaleAxis> axes = {{"batch", 1, 8, 4, 64}};
  const std::vector<Polynomial> counts(7, Polynomial{{3, 2}});
  std::vector<ProfileSample> samples = Samples(axes, counts, {Polynomial{{1, 1}}});
  samples[1].profile.measured[0][0].kept_inputs = {0};  // a size that keeps its input
  absl::StatusOr<ModelProfile> out = Extrapolate(axes, samples, "m", Stages());
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "differ in what they measured"))
      << out.status();

  samples = Samples(axes, counts, {Polynomial{{1, 1}}});
  samples[2].peaks.begin()->second.push_back(0);  // one more allocation in the window
  out = Extrapolate(axes, samples, "m", Stages());
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(),
                                "forward transient: its window made 1 allocations at batch=8 and 2 "
                                "at batch=16"))
      << out.status();
}

TEST(Extrapolate, AFusedKernelsPolicyIsLeftOutNotExtrapolated) {
  const std::vector<ScaleAxis> axes = {{"seq", 2, 16, 4, 1024}};
  const std::vector<Polynomial> counts(7, Polynomial{{3, 2, 1}});
  std::vector<ProfileSample> samples = Samples(axes, counts, {Polynomial{{1, 1, 1}}});
  StageInfo attention;
  attention.name = "block";
  attention.parts = {AttentionCorePart("")};
  int64_t scratch = 100;
  for (ProfileSample& s : samples) {
    s.profile.stages = {attention};
    StageProfile fused = s.profile.measured[0][0];
    fused.policy = PolicyFor(attention, PartKind::kAttentionCore, PartPolicy{PartAction::Fused()});
    fused.forward_transient_bytes = scratch *= 3;  // by blocks: no polynomial of degree 2
    s.profile.measured[0].push_back(fused);
  }
  const absl::StatusOr<ModelProfile> out = Extrapolate(axes, samples, "m", {attention});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->measured[0].size(), 1u);
  EXPECT_TRUE(out->measured[0][0].policy.IsDefault());
  EXPECT_TRUE(absl::StrContains(out->extrapolated, "fused attention cores left out"))
      << out->extrapolated;
}

TEST(Extrapolate, ACountPastInt64IsRefused) {
  const std::vector<ScaleAxis> axes = {{"seq", 2, 8, 4, int64_t{1} << 40}};
  const std::vector<Polynomial> counts(7, Polynomial{{0, 0, int64_t{1} << 20}});
  const absl::StatusOr<ModelProfile> out =
      Extrapolate(axes, Samples(axes, counts, {Polynomial{{1, 0, 0}}}), "m", Stages());
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "overflows")) << out.status();
}

}  // namespace
}  // namespace ckpt
