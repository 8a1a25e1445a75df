#include "experiments/presets.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/plan/strategy.h"
#include "core/run/chain_model.h"

namespace ckpt {
namespace {

// Every registered strategy that runs with its default parameters.
std::vector<std::string> AllStrategies() { return DefaultStrategies(); }

// The presets, from the registries: every strategy, and each model's sizes for the preset.
std::vector<Preset> Presets() {
  Preset quick{"quick",
               "CPU-sized models (each model's quick size) with every strategy, 3 timed rounds "
               "after 1 (a minute or two on 2 cores)",
               {},
               AllStrategies(),
               /*predict_only=*/false,
               /*published=*/{},
               /*steps=*/3,
               /*warmup=*/1};
  Preset paper{"paper",
               "the classic demonstration sizes (Chen et al.'s MLPs, a BERT-base-like encoder, "
               "GPT-2 small and medium): for a GPU or a patient CPU",
               {},
               AllStrategies(),
               /*predict_only=*/false,
               /*published=*/{},
               /*steps=*/10,
               /*warmup=*/2};
  for (const auto* model : Models().Entries()) {
    if (!model->traits.quick_spec.empty()) quick.models.push_back(model->traits.quick_spec);
    for (const std::string& spec : model->traits.paper_specs) paper.models.push_back(spec);
  }
  // The documents this project grew from tabulate checkpointing's savings on these four
  // (about 54-58% each); the sizes are the testbed's assumption, stated in the report.
  Preset seed004{"seed004",
                 "ResNet-152, ViT-B/16, GPT-2 large and LLaMA-7B at stated sizes under store_all, "
                 "uniform and optimal, predicted at full size (--predict) beside the documents' "
                 "figures",
                 {"resnet:size=152:image=224:batch=32", "vit:size=b16:batch=32",
                  "gpt2:size=large:seq=1024:batch=1", "llama:size=7b:seq=512:batch=1"},
                 {"store_all", "uniform", "optimal"},
                 /*predict_only=*/true,
                 {{"resnet", "ResNet-152", 7.2, 3.1},
                  {"vit", "ViT-B/16", 12.5, 5.8},
                  {"gpt2", "GPT-2 774M", 38, 16},
                  {"llama", "LLaMA-7B", 56, 24}},
                 /*steps=*/10,
                 /*warmup=*/2};
  return {quick, paper, seed004};
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
  return absl::NotFoundError(
      absl::StrCat("unknown preset '", name, "'; accepted: ", absl::StrJoin(PresetNames(), ", ")));
}

}  // namespace ckpt
