#include "core/profile.h"

#include <utility>

namespace ckpt {

const StageProfile* ModelProfile::Find(int stage, const StagePolicy& policy) const {
  if (stage < 0 || stage >= static_cast<int>(measured.size())) return nullptr;
  for (const StageProfile& p : measured[stage]) {
    if (p.policy == policy) return &p;
  }
  return nullptr;
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
