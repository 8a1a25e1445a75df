#include "testing/generated_profile.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace ckpt::testing {

rc::Gen<ModelProfile> GeneratedProfile(int max_stages) {
  return rc::gen::exec([max_stages] {
    const int n = *rc::gen::weightedElement<int>({{7, 0}, {3, 1}}).as("size class") == 0
                      ? *rc::gen::inRange(1, 31)
                      : *rc::gen::inRange(30, max_stages + 1);
    ModelProfile p;
    p.model = absl::StrCat("generated:", n);
    p.timed = true;
    std::vector<int64_t> x(n + 1);
    for (int64_t& b : x) b = *rc::gen::inRange<int64_t>(1, 1 << 20);
    const std::vector<PartInfo> kinds[] = {{},
                                           {SequencePart(64)},
                                           {AttentionCorePart(""), SequencePart(64)},
                                           {MlpHiddenPart(), SequencePart(64)}};
    for (int i = 0; i < n; ++i) {
      StageInfo info;
      info.name = absl::StrCat("stage", i);
      info.parts = kinds[*rc::gen::inRange(0, 4)];
      info.kind = info.parts.size() == 2 && info.parts[0].kind == PartKind::kAttentionCore
                      ? StageKind::kAttention
                      : StageKind::kMlp;
      info.stochastic = *rc::gen::arbitrary<bool>();
      p.stages.push_back(info);
      // A parameter of its own, and now and then one tied with a later stage.
      const int64_t own = *rc::gen::inRange<int64_t>(0, 1 << 18);
      const bool tied = i + 1 < n && *rc::gen::weightedElement<bool>({{9, false}, {1, true}});
      std::vector<StageProfile> menu;
      for (const StagePolicy& policy : PolicyMenu(info, p.menu_chunks)) {
        StageProfile s;
        s.policy = policy;
        s.input_bytes = x[i];
        s.output_bytes = x[i + 1];
        s.retained_bytes = *rc::gen::inRange<int64_t>(0, 4 << 20);
        if (*rc::gen::arbitrary<bool>()) s.kept_inputs = {0};
        if (*rc::gen::arbitrary<bool>()) s.kept_outputs = {0};
        s.forward_transient_bytes = *rc::gen::inRange<int64_t>(0, 2 << 20);
        s.nograd_transient_bytes = *rc::gen::inRange<int64_t>(0, 2 << 20);
        s.backward_transient_bytes = *rc::gen::inRange<int64_t>(0, 4 << 20);
        s.backward_input_held_transient_bytes = *rc::gen::inRange<int64_t>(0, 4 << 20);
        s.backward_input_output_held_transient_bytes = *rc::gen::inRange<int64_t>(0, 4 << 20);
        s.backward_held_transient_bytes = *rc::gen::inRange<int64_t>(0, 4 << 20);
        s.param_grads.emplace_back(i, own);
        if (tied) s.param_grads.emplace_back(n, 1 << 16);  // parameter n: shared with stage i + 1
        if (i > 0 && p.measured[i - 1].front().param_grads.size() == 2) {
          s.param_grads.emplace_back(n, 1 << 16);
        }
        s.input_grad_bytes = x[i];
        s.rng_state_bytes = info.stochastic ? 5056 : 0;
        s.costs.input_bytes = x[i];
        s.costs.output_bytes = x[i + 1];
        s.costs.kept_bytes = s.retained_bytes + x[i + 1];
        s.costs.forward_ms = *rc::gen::inRange(1, 1000) / 100.0;
        s.costs.nograd_forward_ms = s.costs.forward_ms * *rc::gen::inRange(50, 100) / 100.0;
        s.costs.backward_ms = s.costs.forward_ms * *rc::gen::inRange(100, 300) / 100.0;
        menu.push_back(s);
      }
      p.measured.push_back(std::move(menu));
    }
    p.loss.output_bytes = 4;
    p.loss.backward_net_bytes = x[n];
    p.loss.input_grad_bytes = x[n];
    p.loss.backward_transient_bytes = x[n] + 4;
    p.loss.forward_transient_bytes = *rc::gen::inRange<int64_t>(0, 3) * x[n];
    p.loss.forward_ms = 0.1;
    p.loss.backward_ms = 0.1;
    // A quarter of the profiles know copy rates (optimal then solves twice, once with offload's
    // contexts): a copy of a boundary takes 0.01 to 10 ms.
    if (*rc::gen::inRange(0, 4) == 0) {
      p.to_host_bytes_per_ms = *rc::gen::inRange(1 << 17, 1 << 27);
      p.from_host_bytes_per_ms = *rc::gen::inRange(1 << 17, 1 << 27);
      p.copies_overlap = *rc::gen::arbitrary<bool>();
      p.link_assumed = *rc::gen::arbitrary<bool>();
    }
    return p;
  });
}

}  // namespace ckpt::testing
