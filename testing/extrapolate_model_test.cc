// Extrapolated profiles on every registered model (Workload::Extrapolate): on generated small
// instances, their batch and sequence set past the held-out sample, the profile extrapolated from
// samples at smaller sizes equals, count for count, the profile measured at the size itself (so
// every strategy's plan, predicted bytes and peaks from it are the measured profile's), or it is
// refused (FailedPrecondition: the samples measured different things, as when a kernel takes
// another path at another size; the caller then measures), never wrong, and at least one case of
// each model that declares sizes is exact. A model that declares none says so (NotFound).
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/plan/extrapolate.h"
#include "core/plan/profile_text.h"
#include "core/run/chain_model.h"
#include "core/run/memory_meter.h"
#include "core/run/workload.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "testing/model_cases.h"

namespace ckpt {
namespace {

using testing::CheckCases;
using testing::SmallModelSpec;

// `spec` with each size it declares to scale with set to a value past its held-out sample (at
// most 27 for a batch, 31 for a sequence, with chunks of 4): a batch from 28 to 44, a sequence from
// 32 to 52 (its context widened to hold it), any residue of the chunk count.
BoundModel PastTheSamples(const BoundModel& model) {
  BoundModel out = model;
  for (const ParamDef& def : model.params()) {
    if (def.scale_degree <= 0) continue;
    const int64_t value = def.scale_degree == 1 ? *rc::gen::inRange<int64_t>(28, 45)
                                                : *rc::gen::inRange<int64_t>(32, 53);
    for (const ParamDef& other : model.params()) {
      if (def.key == "seq" && other.key == "context") {
        out = *out.With("context", absl::StrCat(value + 2));
      }
    }
    out = *out.With(def.key, absl::StrCat(value));
  }
  return out;
}

// The profile's text but for its times, which are estimates where extrapolated, and for its fused
// policies, which extrapolation leaves out (LibTorch 2.x; core/plan/extrapolate.h).
std::string Text(const BoundModel& model, ModelProfile profile) {
  profile.extrapolated.clear();
  profile.loss.forward_ms = profile.loss.backward_ms = 0;
  for (std::vector<StageProfile>& menu : profile.measured) {
    menu.erase(std::remove_if(menu.begin(), menu.end(),
                              [](const StageProfile& s) { return s.policy.RunsFused(); }),
               menu.end());
  }
  return ProfilesToText({{model.spec(), std::move(profile)}});
}

TEST(ExtrapolateModel, EveryModelsExtrapolatedProfileIsTheOneMeasuredAtItsSize) {
  MemoryMeter& meter = **MemoryMeterFor(c10::Device(c10::DeviceType::CPU));
  for (const std::string& id : Models().Ids()) {
    const std::string test = absl::StrCat("extrapolated against measured on ", id);
    int exact = 0, along = 0;  // cases extrapolated exactly; cases with a size to extrapolate
    EXPECT_TRUE(CheckCases(test, 6, [&] {
      const absl::StatusOr<BoundModel> small = BoundModel::Bind(*SmallModelSpec(id));
      RC_ASSERT(small.ok());
      const BoundModel model = PastTheSamples(*small);
      WorkloadOptions options;
      options.profile.timed = false;
      absl::StatusOr<Workload> measured = Workload::Build(model, options);
      absl::StatusOr<Workload> extrapolated = Workload::Build(model, options);
      RC_ASSERT(measured.ok() && extrapolated.ok());
      const absl::Status status = extrapolated->Extrapolate(meter);
      if (ScaleAxes(model.params(), model.values(), options.profile.chunks).empty()) {
        RC_ASSERT(absl::IsNotFound(status));
        RC_TAG("nothing to extrapolate along");
        return;
      }
      ++along;
      if (absl::IsFailedPrecondition(status)) {
        RC_TAG("refused");
        return;
      }
      if (!status.ok()) RC_FAIL(absl::StrCat(model.spec(), ": ", status.message()));
      const absl::StatusOr<const ModelProfile*> want = measured->Profile(meter);
      const absl::StatusOr<const ModelProfile*> got = extrapolated->Profile(meter);
      RC_ASSERT(want.ok() && got.ok());
      RC_ASSERT(!(*got)->extrapolated.empty());
      RC_ASSERT(Text(model, **got) == Text(model, **want));
      RC_TAG("exact");
      ++exact;
    }));
    // Refusing is never wrong, but a model that declares sizes is extrapolated in practice.
    if (along > 0) {
      EXPECT_GT(exact, 0) << id << ": every case refused";
    }
  }
}

}  // namespace
}  // namespace ckpt
