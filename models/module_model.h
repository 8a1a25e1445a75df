// What every model of the zoo shares as a ChainModel: its parameters as bound and its canonical
// spec, its torch::nn module (a TORCH_MODULE holder, moved to the device here), its batch size
// and device; parameters and training mode are the module's. A model derives from
// ModuleModel<ItsModule> and adds its stages (StagesFor(params_), the static declaration the
// registry holds too), loss and batches.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/plan/spec.h"
#include "core/run/chain_model.h"

namespace ckpt {

template <typename Module>
class ModuleModel : public ChainModel {
 public:
  ModuleModel(ParamValues params, std::string spec, Module module, int64_t batch,
              c10::Device device)
      : params_(std::move(params)),
        spec_(std::move(spec)),
        module_(std::move(module)),
        batch_(batch),
        device_(device) {
    module_->to(device);
  }

  std::string spec() const override { return spec_; }
  std::vector<at::Tensor> Parameters() override { return module_->parameters(); }
  std::vector<at::Tensor> State() override { return module_->buffers(); }
  void SetTraining(bool training) override { module_->train(training); }

 protected:
  const ParamValues params_;
  const std::string spec_;
  Module module_;
  const int64_t batch_;
  const c10::Device device_;
};

// A ModuleModel whose last stage returns the loss itself (a head that computes its loss, so
// that chunking it never holds all the logits): Loss passes it on.
template <typename Module>
class HeadLossModel : public ModuleModel<Module> {
 public:
  using ModuleModel<Module>::ModuleModel;
  at::Tensor Loss(const std::vector<at::Tensor>& outputs, const Batch&) override {
    return outputs.at(0);
  }
};

}  // namespace ckpt
