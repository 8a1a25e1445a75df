// Named sweep configurations (--preset): which models and strategies a sweep runs by default,
// taken from the registries: every registered strategy with its default parameters, and each
// registered model's sizes for the preset (ModelTraits), in id order.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt {

struct Preset {
  std::string name;
  std::string description;
  std::vector<std::string> models;
  std::vector<std::string> strategies;
};

// "quick" (the default: CPU-sized, about a minute on 2 cores) or "paper" (the classic
// demonstration sizes, for a GPU or a patient CPU). NotFound names the accepted ones.
absl::StatusOr<Preset> FindPreset(const std::string& name);
std::vector<std::string> PresetNames();

}  // namespace ckpt
