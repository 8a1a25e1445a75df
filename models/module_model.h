// What every model of the zoo shares as a ChainModel: its canonical spec, its torch::nn module
// (a TORCH_MODULE holder), its batch size and device; parameters and training mode are the
// module's. A model derives from ModuleModel<ItsModule> and adds its stages, loss and batches.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/chain_model.h"

namespace ckpt {

template <typename Module>
class ModuleModel : public ChainModel {
 public:
  ModuleModel(std::string spec, Module module, int64_t batch, c10::Device device)
      : spec_(std::move(spec)), module_(std::move(module)), batch_(batch), device_(device) {}

  std::string spec() const override { return spec_; }
  std::vector<at::Tensor> Parameters() override { return module_->parameters(); }
  void SetTraining(bool training) override { module_->train(training); }

 protected:
  const std::string spec_;
  Module module_;
  const int64_t batch_;
  const c10::Device device_;
};

}  // namespace ckpt
