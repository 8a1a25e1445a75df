// What every model of the zoo shares as a ChainModel: its parameters as bound and its canonical
// spec, its network (a ParamSet, models/nn.h, moved to the device here), its batch size and
// device; parameters, state and training mode are the network's. A model derives from
// ModuleModel<ItsNet> and adds its stages (StagesFor(params_), the static declaration the
// registry holds too), loss and batches. The network stays where it was made: its layers' code
// that a plan reruns in backward refers to it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/plan/spec.h"
#include "core/run/chain_model.h"

namespace ckpt {

template <typename Net>
class ModuleModel : public ChainModel {
 public:
  ModuleModel(ParamValues params, std::string spec, std::unique_ptr<Net> module, int64_t batch,
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
  const std::unique_ptr<Net> module_;
  const int64_t batch_;
  const c10::Device device_;
};

// A ModuleModel whose last stage returns the loss itself (a head that computes its loss, so
// that chunking it never holds all the logits): Loss passes it on.
template <typename Net>
class HeadLossModel : public ModuleModel<Net> {
 public:
  using ModuleModel<Net>::ModuleModel;
  at::Tensor Loss(const std::vector<at::Tensor>& outputs, const Batch&) override {
    return outputs.at(0);
  }
};

}  // namespace ckpt
