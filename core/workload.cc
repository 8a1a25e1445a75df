#include "core/workload.h"

#include <utility>

#include "core/status_macros.h"
#include "core/strategy.h"
#include "core/torch_status.h"

namespace ckpt {

absl::StatusOr<Workload> Workload::Build(const std::string& model_spec,
                                         const WorkloadOptions& options) {
  ModelContext context;
  context.device = options.device;
  context.init_seed = options.seed;
  ASSIGN_OR_RETURN(std::shared_ptr<ChainModel> model, CreateModel(model_spec, context));
  ASSIGN_OR_RETURN(Batch batch, RunTorch([&] {
                     model->SetTraining(options.training);
                     return model->MakeBatch(options.seed);
                   }));
  return Workload(std::move(model), std::move(batch), options);
}

absl::StatusOr<const ModelProfile*> Workload::Profile(MemoryMeter& meter) {
  if (profile_ == nullptr) {
    ASSIGN_OR_RETURN(ModelProfile profile,
                     ProfileModel(*model_, batch_, meter, options_.device, options_.profile));
    profile_ = std::make_unique<ModelProfile>(std::move(profile));
  }
  return profile_.get();
}

absl::StatusOr<PlannedRun> Workload::Plan(const std::string& strategy_spec, ModelProfile& profile,
                                          MemoryMeter& meter) {
  ASSIGN_OR_RETURN(ckpt::Plan plan, PlanFor(strategy_spec, profile));  // validated
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

absl::StatusOr<PlannedRun> Workload::Plan(const std::string& strategy_spec, MemoryMeter& meter) {
  RETURN_IF_ERROR(Profile(meter).status());
  return Plan(strategy_spec, *profile_, meter);
}

}  // namespace ckpt
