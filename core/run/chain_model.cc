#include "core/run/chain_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
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

absl::StatusOr<BoundModel> BoundModel::FromSpec(const Spec& spec) {
  ASSIGN_OR_RETURN(const ModelRegistry::Entry* entry, Models().Find(spec.name));
  ASSIGN_OR_RETURN(ParamValues values, BindParams(spec, entry->params));
  if (entry->traits.check) RETURN_IF_ERROR(entry->traits.check(values));
  return BoundModel(entry, std::move(values));
}

absl::StatusOr<BoundModel> BoundModel::Bind(const std::string& spec_text) {
  ASSIGN_OR_RETURN(Spec spec, ParseSpec(spec_text));
  return FromSpec(spec);
}

absl::StatusOr<std::shared_ptr<ChainModel>> BoundModel::Create(const ModelContext& context) const {
  // Two layers: RunTorch's (an exception while building) and the factory's own.
  ASSIGN_OR_RETURN(absl::StatusOr<std::shared_ptr<ChainModel>> model,
                   RunTorch([&] { return entry_->factory(values_, context); }));
  return model;
}

absl::StatusOr<BoundModel> BoundModel::With(const std::string& key,
                                            const std::string& value) const {
  Spec spec{id(), values_.Entries()};
  auto it = std::find_if(spec.params.begin(), spec.params.end(),
                         [&](const auto& entry) { return entry.first == key; });
  if (it == spec.params.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", id(), "' has no ", key, " parameter; accepted: models with one"));
  }
  it->second = value;
  return FromSpec(spec);
}

absl::StatusOr<std::shared_ptr<ChainModel>> CreateModel(const std::string& spec_text,
                                                        const ModelContext& context) {
  ASSIGN_OR_RETURN(BoundModel model, BoundModel::Bind(spec_text));
  return model.Create(context);
}

absl::Status CheckModelSpec(const std::string& spec_text) {
  return BoundModel::Bind(spec_text).status();
}

absl::StatusOr<std::vector<StageInfo>> ModelStages(const std::string& spec_text) {
  ASSIGN_OR_RETURN(BoundModel model, BoundModel::Bind(spec_text));
  return model.Stages();
}

absl::StatusOr<std::string> CanonicalModelSpec(const std::string& spec_text) {
  ASSIGN_OR_RETURN(BoundModel model, BoundModel::Bind(spec_text));
  return model.spec();
}

}  // namespace ckpt
