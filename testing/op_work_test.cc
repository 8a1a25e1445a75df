// The work the profiler counts (StageProfile's OpWork), on generated instances of every
// registered model: each stage's counted matrix-product FLOPs of a forward are the FLOPs the
// model declares for it (StageInfo::forward_flops, derived by hand from its shapes), with and
// without a graph; a backward counts at most the two products per forward product (the input's
// gradient and the weight's), and at least one where the stage has parameters; bytes and
// operators are counted wherever it runs products (a stage of views alone moves nothing). What a
// device model prices is then the model's arithmetic, not an estimate of it.
#include <string>

#include "absl/strings/str_cat.h"
#include "core/plan/profile.h"
#include "core/run/chain_model.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "testing/model_cases.h"

namespace ckpt {
namespace {

using testing::BuildCase;
using testing::CheckCases;
using testing::SmallModelSpec;

TEST(OpWork, CountedProductsAreTheModelsDeclaredFlops) {
  for (const std::string& id : Models().Ids()) {
    const std::string test = absl::StrCat("counted work against declared FLOPs on ", id);
    EXPECT_TRUE(CheckCases(test, 10, [&] {
      const std::string spec = *SmallModelSpec(id);
      absl::StatusOr<testing::Case> c = BuildCase(spec, /*seed=*/1);
      RC_ASSERT(c.ok());
      const ModelProfile& p = c->profile;
      for (int i = 0; i < p.num_stages(); ++i) {
        const StageInfo& stage = p.stages[i];
        const StageProfile& stored = p.Stored(i);
        RC_ASSERT(stored.nograd_work.matmul_flops == stored.forward_work.matmul_flops);
        const double declared = stage.forward_flops;
        if (declared > 0) {
          RC_ASSERT(stored.forward_work.ops > 0 && stored.forward_work.bytes > 0);
          if (static_cast<double>(stored.forward_work.matmul_flops) != declared) {
            RC_FAIL(absl::StrCat(spec, " stage ", i, " (", stage.name, "): counted ",
                                 stored.forward_work.matmul_flops, " FLOPs, declared ", declared));
          }
          RC_ASSERT(stored.backward_work.matmul_flops <= 2 * stored.forward_work.matmul_flops);
          if (!stored.param_grads.empty()) {
            RC_ASSERT(stored.backward_work.matmul_flops >= stored.forward_work.matmul_flops);
          }
        }
      }
      RC_ASSERT(p.loss.backward_work.ops > 0 || p.loss.forward_work.ops > 0);
    }));
  }
}

}  // namespace
}  // namespace ckpt
