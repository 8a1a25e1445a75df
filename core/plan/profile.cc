#include "core/plan/profile.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ckpt {

std::vector<BoundaryStorage> StageProfile::OutputStorages() const {
  if (!outputs.empty()) return outputs;
  return {BoundaryStorage{output_bytes, -1}};
}

int64_t StageProfile::AllocatedOutputBytes() const {
  int64_t bytes = 0;
  for (const BoundaryStorage& s : OutputStorages()) bytes += s.input < 0 ? s.bytes : 0;
  return bytes;
}

void StageProfile::SetCostBytes() {
  costs.input_bytes = input_bytes;
  costs.output_bytes = output_bytes;
  costs.kept_bytes = retained_bytes + output_bytes;
  costs.forward_transient_bytes = forward_transient_bytes;
  costs.nograd_transient_bytes = nograd_transient_bytes;
  costs.backward_transient_bytes = backward_transient_bytes;
  costs.param_grad_bytes = 0;
  for (const auto& [param, bytes] : param_grads) costs.param_grad_bytes += bytes;
}

const StageProfile* ModelProfile::Find(int stage, const StagePolicy& policy) const {
  if (stage < 0 || stage >= static_cast<int>(measured.size())) return nullptr;
  for (const StageProfile& p : measured[stage]) {
    if (p.policy == policy) return &p;
  }
  return nullptr;
}

absl::StatusOr<std::vector<const StageProfile*>> ModelProfile::MeasuredUnder(
    const Plan& plan) const {
  std::vector<const StageProfile*> out;
  for (int j = 0; j < num_stages(); ++j) {
    out.push_back(Find(j, plan.PolicyOf(j)));
    if (out.back() == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the profile of ", model, " has no measurement of stage ", j, " (", stages[j].name,
          ") with ", DescribePolicy(stages[j], plan.PolicyOf(j)), ", which the plan of ",
          plan.strategy, " uses; extend the profile with the plan's policies first"));
    }
  }
  return out;
}

namespace {
// Whether `a` and `b` declare the same work (names apart).
bool SameWork(const StageInfo& a, const StageInfo& b) {
  if (a.kind != b.kind || a.stochastic != b.stochastic || a.updates_state != b.updates_state ||
      a.repeat_key != b.repeat_key || a.forward_flops != b.forward_flops ||
      a.parts.size() != b.parts.size()) {
    return false;
  }
  for (size_t k = 0; k < a.parts.size(); ++k) {
    if (a.parts[k].name != b.parts[k].name || a.parts[k].kind != b.parts[k].kind ||
        a.parts[k].extent != b.parts[k].extent) {
      return false;
    }
  }
  return true;
}

// The index of the shallow stage whose measurements `stages[i]` takes, or -1.
int Counterpart(const std::vector<StageInfo>& shallow, const std::vector<StageInfo>& stages,
                int i) {
  const StageInfo& stage = stages[i];
  const int n = static_cast<int>(shallow.size());
  for (int j = 0; j < n; ++j) {
    if (shallow[j].name == stage.name) return j;
  }
  if (stage.repeat_key.empty()) {
    const int from_end = n - (static_cast<int>(stages.size()) - i);
    return from_end >= 0 && SameWork(shallow[from_end], stage) ? from_end : -1;
  }
  // Never the first stage for a later one: the first one's input is the batch, which the
  // profile treats as the caller's.
  for (int j = n - 1; j >= (i > 0 ? 1 : 0); --j) {
    if (shallow[j].repeat_key == stage.repeat_key) return j;
  }
  return -1;
}
}  // namespace

absl::StatusOr<ModelProfile> ExpandProfile(const ModelProfile& shallow, std::string model,
                                           const std::vector<StageInfo>& stages,
                                           std::vector<int>* counterparts) {
  ModelProfile deep = shallow;
  deep.model = std::move(model);
  deep.stages = stages;
  deep.measured.clear();
  int next_index = 0;  // past every parameter index the shallow profile names
  for (const std::vector<StageProfile>& menu : shallow.measured) {
    for (const StageProfile& p : menu) {
      for (const auto& [param, bytes] : p.param_grads) next_index = std::max(next_index, param + 1);
    }
  }
  std::set<int> taken;
  if (counterparts != nullptr) counterparts->clear();
  for (int i = 0; i < static_cast<int>(stages.size()); ++i) {
    const int j = Counterpart(shallow.stages, stages, i);
    if (j < 0 || !SameWork(shallow.stages[j], stages[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("stage ", i, " (", stages[i].name, ") of ", deep.model,
                       j < 0 ? " has no counterpart in " : " differs from its counterpart in ",
                       shallow.model, "; accepted: a shallower instance of the same model"));
    }
    if (counterparts != nullptr) counterparts->push_back(j);
    std::vector<StageProfile> menu = shallow.measured[j];
    if (!taken.insert(j).second) {
      std::map<int, int> fresh;  // the shallow stage's parameter index -> this stage's
      for (StageProfile& p : menu) {
        for (auto& [param, bytes] : p.param_grads) {
          auto [it, added] = fresh.emplace(param, next_index);
          if (added) {
            ++next_index;
            deep.param_bytes += bytes;
          }
          param = it->second;
        }
      }
    }
    deep.measured.push_back(std::move(menu));
  }
  return deep;
}

ModelProfile StructureOnlyProfile(std::string model, const std::vector<StageInfo>& stages) {
  ModelProfile profile;
  profile.model = std::move(model);
  profile.stages = stages;
  for (const StageInfo& stage : stages) {
    std::vector<StageProfile> menu;
    for (const StagePolicy& policy : PolicyMenu(stage, /*chunks=*/4)) {
      StageProfile p;
      p.policy = policy;
      menu.push_back(p);
    }
    profile.measured.push_back(std::move(menu));
  }
  return profile;
}

}  // namespace ckpt
