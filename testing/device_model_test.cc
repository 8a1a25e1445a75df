// Device models (core/plan/device_model.h), on generated profiles with generated work:
//   - priced, every pass's time is the longer of the device's (its work at the model's rates,
//     products at the half rate under autocast) and the host's (its operators at that pass's
//     cost), the profile timed, its offload link the model's, and every strategy plans on it;
//   - more work never takes less time;
//   - a profile without counted work, and an unknown model, are refused by name (escaped).
#include "core/plan/device_model.h"

#include <algorithm>
#include <string>

#include "absl/strings/match.h"
#include "core/plan/strategy.h"
#include "core/plan/time_model.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"
#include "testing/generated_profile.h"

namespace ckpt {
namespace {

using ::ckpt::testing::GeneratedProfile;

rc::Gen<OpWork> GenWork() {
  return rc::gen::exec([] {
    OpWork w;
    w.matmul_flops = *rc::gen::inRange<int64_t>(0, int64_t{1} << 40);
    w.bytes = *rc::gen::inRange<int64_t>(0, int64_t{1} << 36);
    w.ops = *rc::gen::inRange<int64_t>(1, 1000);
    return w;
  });
}

RC_GTEST_PROP(DeviceModel, PricedTimesAreTheWorkAtTheModelsRates, ()) {
  ModelProfile p = *GeneratedProfile(12);
  p.autocast = *rc::gen::element<std::string>("", "BFloat16");
  for (std::vector<StageProfile>& menu : p.measured) {
    for (StageProfile& s : menu) {
      s.forward_work = *GenWork();
      s.nograd_work = *GenWork();
      s.backward_work = *GenWork();
    }
  }
  p.loss.forward_work = *GenWork();
  p.loss.backward_work = *GenWork();
  const DeviceModel& device = *rc::gen::elementOf(DeviceModels());
  ModelProfile priced = p;
  RC_ASSERT(PriceProfile(device, priced).ok());
  RC_ASSERT(priced.timed);
  RC_ASSERT(priced.link_assumed && priced.to_host_bytes_per_ms == device.link_bytes_per_ms);
  const bool half = !p.autocast.empty();
  const double rate = half ? device.half_flops_per_ms : device.float32_flops_per_ms;
  for (size_t i = 0; i < p.measured.size(); ++i) {
    for (size_t m = 0; m < p.measured[i].size(); ++m) {
      const StageProfile& s = p.measured[i][m];
      const StageCosts& c = priced.measured[i][m].costs;
      const double on_device = s.forward_work.matmul_flops / rate +
                               s.forward_work.bytes / device.bytes_per_ms +
                               s.forward_work.ops * device.ms_per_op;
      RC_ASSERT(c.forward_ms ==
                std::max(on_device, s.forward_work.ops * device.host.forward_ms_per_op));
      RC_ASSERT(c.nograd_forward_ms ==
                std::max(device.Ms(s.nograd_work, half),
                         s.nograd_work.ops * device.host.nograd_forward_ms_per_op));
      RC_ASSERT(c.backward_ms == std::max(device.Ms(s.backward_work, half),
                                          s.backward_work.ops * device.host.backward_ms_per_op));
    }
  }
  RC_ASSERT(priced.loss.forward_ms == device.PassMs(p.loss.forward_work, Pass::kForward, half));
  RC_ASSERT(priced.loss.backward_ms == device.PassMs(p.loss.backward_work, Pass::kBackward, half));
  // Every default strategy plans on it, and its step has a time.
  for (const char* id : {"store_all", "recompute_all", "uniform"}) {
    const absl::StatusOr<Plan> plan = (*BoundStrategy::Bind(id)).PlanFor(priced);
    RC_ASSERT(plan.ok());
    RC_ASSERT(PredictStepMs(priced, *plan).ok());
  }
}

RC_GTEST_PROP(DeviceModel, MoreWorkNeverTakesLessTime, ()) {
  const DeviceModel& device = *rc::gen::elementOf(DeviceModels());
  const OpWork a = *GenWork();
  OpWork b = a;
  b.matmul_flops += *rc::gen::inRange<int64_t>(0, 1 << 30);
  b.bytes += *rc::gen::inRange<int64_t>(0, 1 << 30);
  b.ops += *rc::gen::inRange<int64_t>(0, 100);
  const bool half = *rc::gen::arbitrary<bool>();
  RC_ASSERT(device.Ms(b, half) >= device.Ms(a, half));
  const Pass pass = *rc::gen::element(Pass::kForward, Pass::kNoGradForward, Pass::kBackward);
  RC_ASSERT(device.PassMs(b, pass, half) >= device.PassMs(a, pass, half));
}

TEST(DeviceModel, AProfileWithoutWorkAndAnUnknownModelAreRefusedByName) {
  ModelProfile p;
  p.model = "gpt2:depth=2";
  p.stages.resize(1);
  p.stages[0].name = "block";
  p.measured = {{StageProfile()}};
  const absl::Status status = PriceProfile(**FindDeviceModel("h100"), p);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "gpt2:depth=2")) << status;

  const absl::StatusOr<const DeviceModel*> unknown = FindDeviceModel("h1\x01");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(),
            "--device_model=h1\\x01 is not accepted; accepted: h100, a100, l4");
}

}  // namespace
}  // namespace ckpt
