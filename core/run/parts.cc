#include "core/run/parts.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "c10/util/Exception.h"

namespace ckpt {

StageParts::StageParts(const StageInfo& stage, StagePolicy policy)
    : data_(std::make_shared<const Data>(Data{stage.parts, std::move(policy), stage.name})) {}

PartPolicy StageParts::PolicyOf(absl::string_view name) const {
  for (size_t i = 0; i < data_->parts.size(); ++i) {
    if (data_->parts[i].name == name) return data_->policy.Of(static_cast<int>(i));
  }
  TORCH_CHECK(false, "stage ", data_->stage, " runs a part '", std::string(name),
              "' it does not declare; declared: ",
              absl::StrJoin(data_->parts, ", ", [](std::string* out, const PartInfo& p) {
                absl::StrAppend(out, p.name);
              }));
  return PartPolicy();  // not reached
}

bool StageParts::Fused(absl::string_view name) const {
  return PolicyOf(name).action.def().mechanism == PartMechanism::kFused;
}

std::vector<at::Tensor> StageParts::Run(absl::string_view name, const TensorFn& fn,
                                        const std::vector<at::Tensor>& inputs) const {
  const PartPolicy policy = PolicyOf(name);
  switch (policy.action.def().mechanism) {
    case PartMechanism::kPlain:
    case PartMechanism::kFused:
      return fn(inputs);
    case PartMechanism::kCheckpoint:
      return Checkpoint(fn, inputs, kNoRngReplay);
    case PartMechanism::kDropOutput:
      TORCH_CHECK(false, "stage ", data_->stage, ": part '", std::string(name),
                  "' drops its output until backward; it is run with RunConsumed");
    case PartMechanism::kChunks:
      TORCH_CHECK(false, "stage ", data_->stage, ": part '", std::string(name),
                  "' is chunked; a chunked part is run with RunChunked");
  }
  return fn(inputs);  // not reached
}

std::vector<at::Tensor> StageParts::RunConsumed(absl::string_view name, const TensorFn& fn,
                                                const std::vector<at::Tensor>& inputs,
                                                const TensorFn& consumer) const {
  if (PolicyOf(name).action.def().mechanism == PartMechanism::kDropOutput) {
    return CheckpointDroppingOutput(fn, inputs, consumer);
  }
  return consumer(Run(name, fn, inputs));
}

std::vector<at::Tensor> StageParts::RunChunked(absl::string_view name, const ChunkFn& fn,
                                               const std::vector<at::Tensor>& inputs,
                                               const std::vector<bool>& split, int64_t dim) const {
  const PartPolicy policy = PolicyOf(name);
  const int chunks = policy.action.Counted() ? policy.chunks : 1;
  return ChunkedCheckpoint(fn, inputs, split, dim, chunks, kNoRngReplay);
}

}  // namespace ckpt
