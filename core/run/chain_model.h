// The model interface the executor runs: an ordered chain of stages.
//
// Stage i takes the tensors stage i-1 returned (stage 0 takes the batch's inputs) and
// returns the tensors stage i+1 takes; the loss takes the last stage's outputs and the
// batch's targets. A model declares its stages (kind, named parts, stochastic, FLOPs;
// core/plan/stage.h) to the planner and runs any of them on demand, each named part through the
// StageParts it is handed (core/run/parts.h), so a strategy can store, recompute or chunk them
// without the model knowing plans. Models register like strategies (see models/heavy_mlp.cc),
// one package and one line in models/models.bzl:
//
//   const ModelRegistration<HeavyMlpModel> registration("heavy_mlp", "summary", "quick spec");
//
// besides Params() and Create(), a model class declares its stages from its parameters
// (StagesFor) and the sizes the presets and tests use (see ModelTraits).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "core/plan/registry.h"
#include "core/plan/spec.h"
#include "core/plan/stage.h"
#include "core/run/parts.h"

namespace ckpt {

struct Batch {
  std::vector<at::Tensor> inputs;   // stage 0's inputs; floating ones require grad
  std::vector<at::Tensor> targets;  // what the loss compares against (may be empty)
};

class ChainModel {
 public:
  virtual ~ChainModel() = default;

  // The canonical model spec, every parameter filled in ("heavy_mlp:depth=20:...").
  virtual std::string spec() const = 0;
  virtual std::vector<StageInfo> Stages() const = 0;
  // Runs stage `index` with autograd as the caller's grad mode says, each of its named parts
  // through `parts`, which applies the policy the plan chose; `batch` gives stages that need
  // them the targets (an LM head that computes its own loss).
  virtual std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& inputs,
                                           const StageParts& parts, const Batch& batch) = 0;
  // A scalar, from the last stage's outputs (which may already be the loss).
  virtual at::Tensor Loss(const std::vector<at::Tensor>& outputs, const Batch& batch) = 0;
  // A synthetic batch on the model's device; the same seed gives the same batch.
  virtual Batch MakeBatch(uint64_t seed) = 0;
  virtual std::vector<at::Tensor> Parameters() = 0;
  // The model's buffers: the state a training forward updates besides the parameters
  // (BatchNorm's running statistics and batch counters, updated in place) and any other tensor
  // it holds, whose bytes its stages declare (StageInfo::buffer_bytes); empty for a model
  // without any.
  virtual std::vector<at::Tensor> State() { return {}; }
  virtual void SetTraining(bool training) = 0;
};

// Sets the gradient of every tensor that has one to none (PyTorch's zero_grad(set_to_none)),
// so each step allocates its gradients afresh and steps are alike.
void ClearGradients(const std::vector<at::Tensor>& tensors);

// What every model factory gets besides its parameters.
struct ModelContext {
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  uint64_t init_seed = 0;  // parameters are initialised from this seed
};

// What a model declares besides its parameters: the sizes the presets run and the tests
// generate. In the model class (the quick preset's size is its registration's):
//   static std::vector<std::string> PaperSpecs();
//   static std::string SmallSpec(const SpecChooser& choose);         // optional
struct ModelTraits {
  // Checks what a spec's parameters must satisfy together (hidden a multiple of heads), so a
  // sweep refuses a bad spec before it runs anything. Optional: static absl::Status
  // Check(const ParamValues&) in the model class.
  std::function<absl::Status(const ParamValues&)> check;
  std::string quick_spec;                // the quick preset's size ("": not in it)
  std::vector<std::string> paper_specs;  // the paper preset's sizes
  // A small instance for the conformance and training tests, its sizes picked through the
  // chooser, fast enough for hundreds of steps on a CPU; every spec it returns must be valid.
  // Optional: a model read from a file (torchscript) has none, and its own test makes files.
  std::function<std::string(const SpecChooser&)> small_spec;
  // The stages of the model these parameters make, declared without making it: what a plan
  // file is checked against before anything runs. Instances return the same (Stages()).
  std::function<std::vector<StageInfo>(const ParamValues&)> stages;
  // For a model whose batch is its own, not drawn at a batch parameter's size (a chain file's):
  // the ranks that batch is for, each stepping its share of the rows (core/run/workload.h).
  // Optional: static int BatchRanks(const ParamValues&) in the model class; without it, 0.
  std::function<int(const ParamValues&)> batch_ranks;
  // For a model read from a file: a digest of what the spec names besides itself (the file's
  // bytes), so that what was measured of it is never taken for another file at the same path.
  // Optional: static std::string ContentDigest(const ParamValues&); without it, "".
  std::function<std::string(const ParamValues&)> content_digest;
};

using ModelRegistry = Registry<std::shared_ptr<ChainModel>, ModelTraits, const ModelContext&>;

// The process-wide model registry.
ModelRegistry& Models();

// A model spec parsed, bound and checked once, where a request is read: its registry entry, its
// parameters and its one writing. Everything after carries it (the sweep's configurations, the
// workloads, the depth scan, the ranks' global batch); nothing parses the text again.
//   ASSIGN_OR_RETURN(BoundModel model, BoundModel::Bind("gpt2:depth=4"));
//   ASSIGN_OR_RETURN(std::shared_ptr<ChainModel> m, model.Create(context));
class BoundModel {
 public:
  // Parses, binds and runs the model's Check, creating nothing: NotFound naming an unknown id,
  // InvalidArgument naming a bad parameter or a combination the model refuses.
  static absl::StatusOr<BoundModel> Bind(const std::string& spec_text);

  // The spec's one writing: every parameter in declaration order, defaults filled in, numbers
  // canonical. Two texts name the same model exactly when their specs are equal
  // ("heavy_mlp:batch=2:depth=+4" is "heavy_mlp:depth=4:...").
  const std::string& spec() const { return spec_; }
  const std::string& id() const { return values_.name(); }
  const ParamValues& values() const { return values_; }
  // The parameters the model declares (their ranges: a depth scan's bounds).
  const std::vector<ParamDef>& params() const { return entry_->params; }
  // The stages these parameters make, declared without making the model.
  std::vector<StageInfo> Stages() const { return entry_->traits.stages(values_); }
  // ModelTraits::batch_ranks: 0 for a model whose batch parameter sets the rows per rank.
  int BatchRanks() const {
    return entry_->traits.batch_ranks ? entry_->traits.batch_ranks(values_) : 0;
  }
  // ModelTraits::content_digest: "" for a model its spec says all of.
  std::string ContentDigest() const {
    return entry_->traits.content_digest ? entry_->traits.content_digest(values_) : "";
  }

  // The model on the context's device (LibTorch's errors become a Status).
  absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ModelContext& context) const;

  // The same model with parameter `key` set to `value`, bound and checked as Bind does: a depth
  // scan's depth, the global batch that ranks share. InvalidArgument naming the key where the
  // model declares no such parameter.
  absl::StatusOr<BoundModel> With(const std::string& key, const std::string& value) const;

 private:
  BoundModel(const ModelRegistry::Entry* entry, ParamValues values)
      : entry_(entry), values_(std::move(values)), spec_(values_.Canonical()) {}
  static absl::StatusOr<BoundModel> FromSpec(const Spec& spec);

  const ModelRegistry::Entry* entry_;  // the registry's: it outlives every model
  ParamValues values_;
  std::string spec_;
};

// Conveniences for a spec written once in code or a test (bind it where it is read when it is
// carried through a run): Bind's errors, then what BoundModel gives.
absl::StatusOr<std::shared_ptr<ChainModel>> CreateModel(const std::string& spec_text,
                                                        const ModelContext& context);
absl::Status CheckModelSpec(const std::string& spec_text);
absl::StatusOr<std::vector<StageInfo>> ModelStages(const std::string& spec_text);
absl::StatusOr<std::string> CanonicalModelSpec(const std::string& spec_text);

namespace internal {
template <typename T, typename = void>
struct CheckOf {
  static std::function<absl::Status(const ParamValues&)> Get() { return nullptr; }
};
template <typename T>
struct CheckOf<T, std::void_t<decltype(&T::Check)>> {
  static std::function<absl::Status(const ParamValues&)> Get() { return &T::Check; }
};

template <typename T, typename = void>
struct BatchRanksOf {
  static std::function<int(const ParamValues&)> Get() { return nullptr; }
};
template <typename T>
struct BatchRanksOf<T, std::void_t<decltype(&T::BatchRanks)>> {
  static std::function<int(const ParamValues&)> Get() { return &T::BatchRanks; }
};

template <typename T, typename = void>
struct ContentDigestOf {
  static std::function<std::string(const ParamValues&)> Get() { return nullptr; }
};
template <typename T>
struct ContentDigestOf<T, std::void_t<decltype(&T::ContentDigest)>> {
  static std::function<std::string(const ParamValues&)> Get() { return &T::ContentDigest; }
};

template <typename T, typename = void>
struct SmallSpecOf {
  static std::function<std::string(const SpecChooser&)> Get() { return nullptr; }
};
template <typename T>
struct SmallSpecOf<T, std::void_t<decltype(&T::SmallSpec)>> {
  static std::function<std::string(const SpecChooser&)> Get() { return &T::SmallSpec; }
};
}  // namespace internal

// A model class T registered under `id`; `quick_spec` is the quick preset's size ("": not in it).
// T::Create is handed parameters its Check accepted (BoundModel checks before it creates).
template <typename T>
struct ModelRegistration {
  ModelRegistration(const char* id, const char* summary, const char* quick_spec) {
    Models().Register(
        {id, summary, T::Params(), &T::Create,
         ModelTraits{internal::CheckOf<T>::Get(), quick_spec, T::PaperSpecs(),
                     internal::SmallSpecOf<T>::Get(), &T::StagesFor,
                     internal::BatchRanksOf<T>::Get(), internal::ContentDigestOf<T>::Get()}});
  }
};

}  // namespace ckpt
