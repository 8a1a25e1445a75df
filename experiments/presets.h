// Named sweep configurations (--preset): which models and strategies a sweep runs by default,
// taken from the registries: every registered strategy with its default parameters, and each
// registered model's sizes for the preset (ModelTraits), in id order.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt {

// Training memory a publication gives for a model without and with activation checkpointing
// (sizes and precision unstated there), to set beside the testbed's prediction.
struct PublishedSaving {
  std::string model;  // the model id it is for
  std::string what;   // the model as the publication names it
  double without_gb = 0;
  double with_gb = 0;
};

struct Preset {
  std::string name;
  std::string description;
  std::vector<std::string> models;
  std::vector<std::string> strategies;
  // Sizes no machine here holds: the preset runs only with --predict.
  bool predict_only = false;
  std::vector<PublishedSaving> published;
  // Timed and untimed rounds per configuration where --steps and --warmup are not given.
  int steps = 10;
  int warmup = 2;
};

// "quick" (the default: CPU-sized, 3 timed rounds after 1, a minute or two on 2 cores), "paper"
// (the classic demonstration sizes, for a GPU or a patient CPU) or "seed004" (ResNet-152, ViT-B/16,
// GPT-2 large and LLaMA-7B at stated sizes, predicted: --predict, beside the figures of the
// documents the project grew from). NotFound names the accepted ones.
absl::StatusOr<Preset> FindPreset(const std::string& name);
std::vector<std::string> PresetNames();

}  // namespace ckpt
