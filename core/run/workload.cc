#include "core/run/workload.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/plan/extrapolate.h"
#include "core/plan/profile_text.h"
#include "core/plan/spec.h"
#include "core/plan/strategy.h"
#include "core/run/torch_status.h"

namespace ckpt {

absl::StatusOr<BoundModel> ScaledBatch(const BoundModel& model, int factor) {
  const auto& entries = model.values().Entries();
  auto batch = std::find_if(entries.begin(), entries.end(),
                            [](const auto& entry) { return entry.first == "batch"; });
  int64_t rows = 0;
  if (batch == entries.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", model.spec(), " has no batch parameter, so its batch cannot be shared among ",
        factor, " ranks"));
  }
  if (!absl::SimpleAtoi(batch->second, &rows)) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch=", batch->second, " in ", model.spec(), " is not an integer"));
  }
  return model.With("batch", absl::StrCat(rows * factor));
}

absl::Status CheckRanks(const BoundModel& model, int world_size) {
  const int own = model.BatchRanks();
  if (own == 0) return world_size == 1 ? absl::OkStatus() : ScaledBatch(model, world_size).status();
  if (own == world_size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "model ", model.spec(), " holds its batch for ", own, own == 1 ? " rank" : " ranks",
      " (its stages take 1/", own, " of its rows), not ", world_size, "; accepted: ", own,
      own == 1 ? " rank" : " ranks", " (--nproc=", own,
      "), or a file cut for another count (ckptlab.chain's ranks=)"));
}

namespace {

// Whether every tensor of `batch` has a first dimension `world_size` ranks can share.
absl::Status CheckShareable(const Batch& batch, int world_size) {
  for (const auto* tensors : {&batch.inputs, &batch.targets}) {
    for (const at::Tensor& t : *tensors) {
      if (t.dim() == 0 || t.size(0) % world_size != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("a batch tensor of shape ", c10::str(t.sizes()), " has no first ",
                         "dimension that ", world_size, " ranks can share"));
      }
    }
  }
  return absl::OkStatus();
}

// Rows [rank b, (rank + 1) b) of every tensor of `global` (world_size b rows), as tensors of
// their own, the floating inputs requiring grad as the global batch's do. Throws LibTorch's.
Batch Share(const Batch& global, int rank, int world_size) {
  const auto rows = [&](const std::vector<at::Tensor>& from) {
    std::vector<at::Tensor> to;
    for (const at::Tensor& t : from) {
      const int64_t b = t.size(0) / world_size;
      to.push_back(t.detach().narrow(0, rank * b, b).clone().requires_grad_(t.requires_grad()));
    }
    return to;
  };
  return Batch{rows(global.inputs), rows(global.targets)};
}

// The model batches are drawn from: `model` itself for one rank or a batch of its own, else one
// of the global batch's spec, on the context's device.
absl::StatusOr<std::shared_ptr<ChainModel>> MakeDrawer(const BoundModel& bound,
                                                       const std::shared_ptr<ChainModel>& model,
                                                       const ModelContext& context,
                                                       int world_size) {
  if (world_size == 1 || bound.BatchRanks() > 0) return model;
  ASSIGN_OR_RETURN(BoundModel global, ScaledBatch(bound, world_size));
  return global.Create(context);
}

// The batch `drawer` draws from `seed`, rows [rank b, (rank + 1) b) of it.
absl::StatusOr<Batch> Draw(ChainModel& drawer, uint64_t seed, int rank, int world_size) {
  ASSIGN_OR_RETURN(Batch batch, RunTorch([&] { return drawer.MakeBatch(seed); }));
  if (world_size == 1) return batch;
  RETURN_IF_ERROR(CheckShareable(batch, world_size));
  return RunTorch([&] { return Share(batch, rank, world_size); });
}

ModelContext ContextOf(const WorkloadOptions& options) {
  ModelContext context;
  context.device = options.device;
  context.init_seed = options.seed;
  return context;
}

}  // namespace

absl::StatusOr<Workload> Workload::Build(const std::string& model_spec,
                                         const WorkloadOptions& options) {
  ASSIGN_OR_RETURN(BoundModel model, BoundModel::Bind(model_spec));
  return Build(model, options);
}

absl::StatusOr<Workload> Workload::Build(const BoundModel& bound, const WorkloadOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " of world size ", options.world_size,
                     " is not accepted; accepted: world size >= 1 and 0 <= rank < world size"));
  }
  RETURN_IF_ERROR(CheckRanks(bound, options.world_size));
  const ModelContext context = ContextOf(options);
  ASSIGN_OR_RETURN(std::shared_ptr<ChainModel> model, bound.Create(context));
  RETURN_IF_ERROR(RunTorch([&] { model->SetTraining(options.training); }));
  // Drawn with a drawer of its own, not kept: the measured baseline holds this model alone.
  ASSIGN_OR_RETURN(std::shared_ptr<ChainModel> drawer,
                   MakeDrawer(bound, model, context, options.world_size));
  ASSIGN_OR_RETURN(Batch batch, Draw(*drawer, options.seed, options.rank, options.world_size));
  return Workload(bound, std::move(model), std::move(batch), options);
}

absl::StatusOr<Batch> Workload::MakeBatch(uint64_t seed) {
  if (drawer_ == nullptr) {
    ASSIGN_OR_RETURN(drawer_, MakeDrawer(bound_, model_, ContextOf(options_), options_.world_size));
  }
  return Draw(*drawer_, seed, options_.rank, options_.world_size);
}

absl::StatusOr<const ModelProfile*> Workload::Profile(MemoryMeter& meter) {
  if (profile_ == nullptr) {
    ASSIGN_OR_RETURN(ModelProfile profile,
                     ProfileModel(*model_, batch_, meter, options_.device, options_.profile));
    profile_ = std::make_unique<ModelProfile>(std::move(profile));
  }
  return profile_.get();
}

absl::Status Workload::Extrapolate(MemoryMeter& meter,
                                   const std::function<void(const std::string&)>& starting) {
  const std::vector<ScaleAxis> axes =
      ScaleAxes(bound_.params(), bound_.values(), options_.profile.chunks);
  if (axes.empty()) {
    return absl::NotFoundError(
        absl::StrCat(bound_.spec(), " declares no size large enough to extrapolate along"));
  }
  const std::vector<std::vector<int64_t>> points = SamplePoints(axes);
  std::vector<ProfileSample> samples(points.size());
  for (size_t s = 0; s < points.size(); ++s) {
    BoundModel sample = bound_;
    for (size_t a = 0; a < axes.size(); ++a) {
      absl::StatusOr<BoundModel> at = sample.With(axes[a].param, absl::StrCat(points[s][a]));
      if (!at.ok()) {  // the model refuses a size that small: measured at its own instead
        return absl::FailedPreconditionError(
            absl::StrCat("the sample at ", axes[a].param, "=", points[s][a], " is refused (",
                         at.status().message(), "); not extrapolated"));
      }
      sample = *std::move(at);
    }
    if (starting) {
      std::string at;
      for (size_t a = 0; a < axes.size(); ++a) {
        absl::StrAppend(&at, a > 0 ? ", " : "", axes[a].param, "=", points[s][a]);
      }
      starting(absl::StrCat(s + 1 == points.size() ? "held-out sample" : "sample", " ", s + 1,
                            " of ", points.size(), ", ", at));
    }
    WorkloadOptions options = options_;
    options.profile.timed = options_.profile.timed && s + 1 == points.size();
    options.profile.peaks = &samples[s].peaks;
    ASSIGN_OR_RETURN(Workload workload, Build(sample, options));
    ASSIGN_OR_RETURN(const ModelProfile* profile, workload.Profile(meter));
    samples[s].profile = *profile;
  }
  ASSIGN_OR_RETURN(const std::vector<StageInfo> stages, RunTorch([&] { return model_->Stages(); }));
  ASSIGN_OR_RETURN(ModelProfile profile, ckpt::Extrapolate(axes, samples, model_->spec(), stages));
  profile_ = std::make_unique<ModelProfile>(std::move(profile));
  return absl::OkStatus();
}

absl::Status Workload::AdoptProfile(ModelProfile profile) {
  // The model's own spec, as its profiler names it: sizes a preset leaves "auto" resolved.
  if (profile.model != model_->spec()) {
    return absl::InvalidArgumentError(
        absl::StrCat("it is of model ", profile.model, ", not ", model_->spec()));
  }
  ASSIGN_OR_RETURN(const std::vector<StageInfo> stages, RunTorch([&] { return model_->Stages(); }));
  if (StagesToText(profile.stages) != StagesToText(stages)) {
    return absl::InvalidArgumentError("its stages are not those the model declares now");
  }
  profile_ = std::make_unique<ModelProfile>(std::move(profile));
  return absl::OkStatus();
}

absl::StatusOr<PlannedRun> Workload::Prepare(const BoundStrategy& strategy, ModelProfile& profile,
                                             MemoryMeter& meter) {
  ASSIGN_OR_RETURN(ckpt::Plan plan, strategy.PlanFor(profile));  // validated
  return PrepareValid(std::move(plan), profile, meter);
}

absl::StatusOr<PlannedRun> Workload::Prepare(ckpt::Plan plan, ModelProfile& profile,
                                             MemoryMeter& meter) {
  RETURN_IF_ERROR(ValidatePlan(plan, profile.stages));
  return PrepareValid(std::move(plan), profile, meter);
}

absl::StatusOr<PlannedRun> Workload::PrepareValid(ckpt::Plan plan, ModelProfile& profile,
                                                  MemoryMeter& meter) {
  RETURN_IF_ERROR(
      ExtendProfile(*model_, batch_, meter, options_.device, plan, profile, options_.profile));
  ASSIGN_OR_RETURN(MemoryPrediction predicted, PredictMemory(profile, plan));
  ASSIGN_OR_RETURN(ChainExecutor executor,
                   ChainExecutor::Create(model_, plan, &meter, options_.device));
  return PlannedRun{std::move(plan), predicted, std::move(executor)};
}

absl::StatusOr<PlannedRun> Workload::Prepare(const BoundStrategy& strategy, MemoryMeter& meter) {
  RETURN_IF_ERROR(Profile(meter).status());
  return Prepare(strategy, *profile_, meter);
}

}  // namespace ckpt
