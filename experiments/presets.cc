#include "experiments/presets.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ckpt {
namespace {

const std::vector<std::string> kAllStrategies = {"store_all", "uniform", "recompute_all",
                                                 "selective_attention", "chunked_sequence"};

const std::vector<Preset>& Presets() {
  static const auto* presets = new std::vector<Preset>{
      {"quick", "CPU-sized MLP, encoder and decoder with every strategy (about a minute here)",
       {"heavy_mlp:depth=16:hidden=1024:batch=64",
        "transformer:depth=4:hidden=256:heads=4:seq=128:batch=4",
        "gpt2:depth=4:hidden=256:heads=4:seq=128:batch=2:vocab=8192"},
       kAllStrategies},
      {"paper",
       "the classic demonstration sizes (Chen et al.'s MLPs, BERT-base-like encoder, GPT-2 "
       "small and medium): for a GPU or a patient CPU",
       {"heavy_mlp:depth=20:hidden=4096:batch=32", "heavy_mlp:depth=40:hidden=4096:batch=64",
        "deep_mlp:depth=20:hidden=1024:batch=32",
        "transformer:depth=6:hidden=768:heads=12:seq=256:batch=4",
        "gpt2:size=small:seq=256:batch=2", "gpt2:size=medium:seq=256:batch=2"},
       kAllStrategies},
  };
  return *presets;
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : Presets()) names.push_back(p.name);
  return names;
}

absl::StatusOr<Preset> FindPreset(const std::string& name) {
  for (const Preset& p : Presets()) {
    if (p.name == name) return p;
  }
  return absl::NotFoundError(absl::StrCat("unknown preset '", name,
                                          "'; accepted: ", absl::StrJoin(PresetNames(), ", ")));
}

}  // namespace ckpt
