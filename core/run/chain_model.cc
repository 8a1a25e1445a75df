#include "core/run/chain_model.h"

#include "core/base/status_macros.h"
#include "core/run/torch_status.h"

namespace ckpt {

void ClearGradients(const std::vector<at::Tensor>& tensors) {
  for (const at::Tensor& t : tensors) {
    if (t.defined() && t.grad().defined()) t.mutable_grad().reset();
  }
}

ModelRegistry& Models() {
  static auto* registry = new ModelRegistry("model");  // leaked: outlives statics
  return *registry;
}

absl::StatusOr<std::string> CanonicalModelSpec(const std::string& spec_text) {
  ASSIGN_OR_RETURN(Spec spec, ParseSpec(spec_text));
  ASSIGN_OR_RETURN(const ModelRegistry::Entry* entry, Models().Find(spec.name));
  ASSIGN_OR_RETURN(ParamValues values, Models().Bind(spec));
  if (entry->traits.check) RETURN_IF_ERROR(entry->traits.check(values));
  return values.Canonical();
}

absl::StatusOr<std::vector<StageInfo>> ModelStages(const std::string& spec_text) {
  ASSIGN_OR_RETURN(Spec spec, ParseSpec(spec_text));
  ASSIGN_OR_RETURN(const ModelRegistry::Entry* entry, Models().Find(spec.name));
  ASSIGN_OR_RETURN(ParamValues values, Models().Bind(spec));
  if (entry->traits.check) RETURN_IF_ERROR(entry->traits.check(values));
  return entry->traits.stages(values);
}

absl::Status CheckModelSpec(const std::string& spec_text) {
  return CanonicalModelSpec(spec_text).status();
}

absl::StatusOr<std::shared_ptr<ChainModel>> CreateModel(const std::string& spec_text,
                                                        const ModelContext& context) {
  ASSIGN_OR_RETURN(Spec spec, ParseSpec(spec_text));
  // Two layers: RunTorch's (an exception while building) and the factory's own.
  ASSIGN_OR_RETURN(absl::StatusOr<std::shared_ptr<ChainModel>> model,
                   RunTorch([&] { return Models().Create(spec, context); }));
  return model;
}

}  // namespace ckpt
