// --predict's answers against the full model's: every registered model with a depth parameter,
// profiled at depth 2 and expanded to depth 5 (ExpandProfile), predicts every default
// strategy's plan exactly as the profile of the depth-5 model built whole does (activation and
// peak bytes to the byte, the parameters' bytes), and the depth-5 model's measured step after
// forward holds exactly the predicted activation bytes. A model without one is built whole.
#include "experiments/predict.h"

#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ATen/ops/ones_like.h"
#include "absl/strings/str_cat.h"
#include "core/base/files.h"
#include "core/plan/device_model.h"
#include "core/plan/memory_model.h"
#include "core/plan/plan_text.h"
#include "core/plan/profile_text.h"
#include "core/plan/states.h"
#include "core/plan/strategy.h"
#include "core/plan/time_model.h"
#include "core/run/memory_meter.h"
#include "core/run/workload.h"
#include "experiments/kept_profiles.h"
#include "experiments/sweep.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"
#include "testing/model_cases.h"
#include "torch/optim/adamw.h"

namespace ckpt {
namespace {

MemoryMeter& Cpu() { return **MemoryMeterFor(c10::Device(c10::DeviceType::CPU)); }

TEST(Predict, ShallowProfilesPredictTheFullModelExactly) {
  int expanded = 0;
  for (const std::string& id : Models().Ids()) {
    SCOPED_TRACE(id);
    const BoundModel small = BoundModel::Bind(testing::FixedSmallSpec(id)).value();
    absl::StatusOr<std::vector<BoundModel>> deep = DepthScanModels(small, {5});
    if (!deep.ok()) {  // no depth parameter: built whole
      EXPECT_EQ(ShallowModel(small)->spec(), small.spec());
      continue;
    }
    ++expanded;
    SweepOptions options;
    options.models = {deep->front()};
    options.strategies = BindStrategies(DefaultStrategies()).value();
    std::ostringstream progress;
    absl::StatusOr<std::vector<Prediction>> rows =
        Predict(options, PredictSetting{StatesSetting{}, std::nullopt}, Cpu(), progress);
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(rows->size(), options.strategies.size());
    EXPECT_EQ(rows->front().profiled, ShallowModel(deep->front())->spec());
    EXPECT_NE(rows->front().profiled, rows->front().model);

    absl::StatusOr<Workload> whole = Workload::Build(deep->front(), WorkloadOptions{});
    ASSERT_TRUE(whole.ok()) << whole.status();
    absl::StatusOr<const ModelProfile*> measured = whole->Profile(Cpu());
    ASSERT_TRUE(measured.ok()) << measured.status();
    ModelProfile profile = **measured;
    int64_t parameter_bytes = 0;
    for (const at::Tensor& p : whole->model()->Parameters()) parameter_bytes += p.nbytes();
    // The buffers, each storage once, a parameter's not.
    std::set<const void*> held;
    for (const at::Tensor& p : whole->model()->Parameters()) held.insert(p.storage().data());
    int64_t buffer_bytes = 0;
    for (const at::Tensor& b : whole->model()->State()) {
      if (held.insert(b.storage().data()).second) buffer_bytes += b.storage().nbytes();
    }
    // The batch: its inputs and targets, a storage they share counted once.
    int64_t batch_bytes = 0;
    std::set<const void*> storages;
    for (const std::vector<at::Tensor>* tensors :
         {&whole->batch().inputs, &whole->batch().targets}) {
      for (const at::Tensor& t : *tensors) {
        if (storages.insert(t.storage().data()).second) batch_bytes += t.storage().nbytes();
      }
    }
    for (const Prediction& row : *rows) {
      SCOPED_TRACE(row.strategy + ": " + row.plan);
      ASSERT_EQ(row.status, RowStatus::kOk) << row.error;
      EXPECT_EQ(row.parameter_bytes, parameter_bytes);
      EXPECT_EQ(row.buffer_bytes, buffer_bytes);
      EXPECT_EQ(row.batch_bytes, batch_bytes);
      // The same plan on the whole model (planners may choose otherwise from other timings).
      absl::StatusOr<Plan> plan = ParsePlan(row.plan, profile.stages, row.strategy);
      ASSERT_TRUE(plan.ok()) << plan.status();
      absl::StatusOr<PlannedRun> run = whole->Prepare(*plan, profile, Cpu());
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_EQ(row.activation_bytes, run->predicted.activation_bytes);
      EXPECT_EQ(row.step_peak_bytes, run->predicted.peak_bytes);
      absl::StatusOr<StepResult> step = run->executor.Step(whole->batch());
      ASSERT_TRUE(step.ok()) << step.status();
      EXPECT_EQ(row.activation_bytes, step->activation_bytes);
      // What a step starts from is what the total counts besides AdamW's state: every byte the
      // model and its batch hold, each once.
      EXPECT_EQ(step->baseline_bytes, row.parameter_bytes + row.buffer_bytes + row.batch_bytes);
      EXPECT_EQ(row.total_peak_bytes, row.parameter_bytes + row.buffer_bytes + row.optimizer_bytes +
                                          row.batch_bytes +
                                          std::max(row.step_peak_bytes, row.gradient_bytes));
    }
  }
  EXPECT_GT(expanded, 0);
}

// A card's memory between recompute_all's total and store_all's: each row says whether it fits
// (its total within the card over the allocator's margin), optimal plans again to what the card
// leaves the step and fits, and the first line answers; a card too small fits nothing.
TEST(Predict, ADeviceMemoryAnswersWhetherEachPlanFits) {
  // Activations outweigh the state: long sequences, a small vocabulary.
  SweepOptions options;
  options.models = {
      BoundModel::Bind("gpt2:depth=4:hidden=16:heads=2:seq=64:batch=4:vocab=32:context=64")
          .value()};
  options.strategies = BindStrategies({"store_all", "recompute_all", "optimal"}).value();
  std::ostringstream progress;
  absl::StatusOr<std::vector<Prediction>> plain =
      Predict(options, PredictSetting{StatesSetting{}, std::nullopt}, Cpu(), progress);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_EQ(plain->size(), 3u);
  for (const Prediction& row : *plain) EXPECT_FALSE(row.Fits().has_value());
  const Prediction& store_all = (*plain)[0];
  const Prediction& recompute_all = (*plain)[1];
  ASSERT_LT(recompute_all.total_peak_bytes, store_all.total_peak_bytes);

  const double margin = AllocatorMargin(options.models.front().spec());
  EXPECT_GE(margin, 1.0);
  const int64_t usable = (recompute_all.total_peak_bytes + store_all.total_peak_bytes) / 2;
  const int64_t card = static_cast<int64_t>(usable * margin);
  absl::StatusOr<std::vector<Prediction>> rows =
      Predict(options, PredictSetting{StatesSetting{}, card}, Cpu(), progress);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 4u);  // the three, then optimal at what the card leaves
  for (const Prediction& row : *rows) {
    SCOPED_TRACE(row.strategy);
    ASSERT_EQ(row.status, RowStatus::kOk) << row.error;
    EXPECT_EQ(row.device_memory, card);
    EXPECT_EQ(row.Fits(), row.total_peak_bytes <= static_cast<int64_t>(card / margin));
  }
  EXPECT_EQ((*rows)[0].Fits(), false);
  EXPECT_EQ((*rows)[1].Fits(), true);
  const Prediction& fitted = (*rows)[3];
  EXPECT_EQ(fitted.strategy.rfind("optimal:", 0), 0u);
  EXPECT_EQ(fitted.Fits(), true);
  EXPECT_LE(fitted.step_ms, (*rows)[1].step_ms);  // no slower than recomputing everything
  const std::string table = PredictionTable(*rows);
  EXPECT_EQ(table.rfind("- " + options.models.front().spec() + ": **fits** in ", 0), 0u) << table;

  absl::StatusOr<std::vector<Prediction>> tiny =
      Predict(options, PredictSetting{StatesSetting{}, int64_t{1}}, Cpu(), progress);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  ASSERT_EQ(tiny->size(), 4u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ((*tiny)[i].Fits(), false);
  EXPECT_EQ((*tiny)[3].status, RowStatus::kOom);
  EXPECT_NE((*tiny)[3].error.find("alone are past --device_memory"), std::string::npos)
      << (*tiny)[3].error;
  // Labelled by the budget it was for, the nothing the card leaves: not as optimal's row above.
  EXPECT_NE((*tiny)[3].strategy.find(":budget=0"), std::string::npos) << (*tiny)[3].strategy;
  EXPECT_NE(PredictionTable(*tiny).find("**does not fit** in "), std::string::npos);
}

// A device model prices the work the profiler counts, so --predict with one profiles without
// timing (SweepOptions::profile_times): its rows are those of a timed profile priced alike, to
// the byte and the millisecond, and its kept profile is another key than a timed one's.
TEST(Predict, ADeviceModelsAnswerNeedsNoMeasuredTimes) {
  const DeviceModel* h100 = FindDeviceModel("h100").value();
  SweepOptions options;
  options.models = {
      BoundModel::Bind("gpt2:depth=3:hidden=16:heads=2:seq=40:batch=2:vocab=32:context=40")
          .value()};
  options.strategies = BindStrategies(DefaultStrategies()).value();
  std::ostringstream progress;
  const PredictSetting setting{StatesSetting{}, std::nullopt, /*extrapolate=*/true, h100};
  absl::StatusOr<std::vector<Prediction>> timed = Predict(options, setting, Cpu(), progress);
  const std::string timed_key = ProfileSetting(WorkloadOptionsFor(options), true);
  options.profile_times = false;
  absl::StatusOr<std::vector<Prediction>> untimed = Predict(options, setting, Cpu(), progress);
  ASSERT_TRUE(timed.ok()) << timed.status();
  ASSERT_TRUE(untimed.ok()) << untimed.status();
  ASSERT_EQ(timed->size(), options.strategies.size());
  ASSERT_EQ(untimed->size(), timed->size());
  for (size_t i = 0; i < timed->size(); ++i) {
    const Prediction& a = (*timed)[i];
    const Prediction& b = (*untimed)[i];
    SCOPED_TRACE(a.strategy);
    ASSERT_EQ(a.status, RowStatus::kOk) << a.error;
    EXPECT_EQ(b.status, RowStatus::kOk) << b.error;
    EXPECT_EQ(b.device_model, "h100");
    EXPECT_FALSE(b.extrapolated.empty());
    EXPECT_EQ(b.plan, a.plan);
    EXPECT_EQ(b.activation_bytes, a.activation_bytes);
    EXPECT_EQ(b.step_peak_bytes, a.step_peak_bytes);
    EXPECT_DOUBLE_EQ(b.step_ms, a.step_ms);
    EXPECT_GT(b.step_ms, 0);
  }
  EXPECT_NE(ProfileSetting(WorkloadOptionsFor(options), true), timed_key);
}

// profiles.txt (experiments/kept_profiles.h), for every registered model and one whose sizes a
// preset fills in ("auto" in its spec, resolved in its profile's): a second prediction in
// the folder plans from the profile the first kept and measures nothing, to the same bytes and
// times; what it plans from is the file's (times edited there are the times predicted); a kept
// profile whose stages are not the model's, or a damaged file, is measured again and replaced.
TEST(KeptProfiles, ASecondPredictionPlansFromTheFirstsProfile) {
  absl::StatusOr<ScratchFolder> dir = ScratchFolder::Make(::testing::TempDir(), "kept.");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string path = dir->Path(KeptProfiles::kFile);
  SweepOptions options;
  options.strategies = BindStrategies(DefaultStrategies()).value();
  const std::string setting = ProfileSetting(WorkloadOptionsFor(options), false);
  ASSERT_NE(setting, "");
  // The predictions, and the progress lines in `progress_text`.
  const auto predict = [&](std::string& progress_text) {
    KeptProfiles kept = KeptProfiles::Open(path, setting);
    EXPECT_EQ(kept.note(), "");
    options.kept = &kept;
    std::ostringstream progress;
    absl::StatusOr<std::vector<Prediction>> rows =
        Predict(options, PredictSetting{StatesSetting{}, std::nullopt}, Cpu(), progress);
    options.kept = nullptr;
    progress_text = progress.str();
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? *rows : std::vector<Prediction>();
  };
  constexpr char kTaken[] = "not measured again";
  std::vector<Prediction> cold;
  std::vector<std::string> specs;
  for (const std::string& id : Models().Ids()) specs.push_back(testing::FixedSmallSpec(id));
  specs.push_back("llama:size=tiny:seq=4:batch=2:vocab=64");  // sizes its preset resolves
  for (const std::string& spec : specs) {
    SCOPED_TRACE(spec);
    options.models = {BoundModel::Bind(spec).value()};
    std::string progress;
    cold = predict(progress);
    EXPECT_EQ(progress.find(kTaken), std::string::npos) << progress;
    const std::vector<Prediction> warm = predict(progress);
    EXPECT_NE(progress.find(kTaken), std::string::npos) << progress;
    EXPECT_EQ(PredictionCsv(warm), PredictionCsv(cold));
  }
  // The last model's profile, its times made ten times longer in the file.
  const auto edit = [&](const std::function<void(ModelProfile&)>& change) {
    absl::StatusOr<std::vector<KeyedProfile>> entries =
        ProfilesFromText(ReadRegularFile(path, 1 << 28).value());
    ASSERT_TRUE(entries.ok()) << entries.status();
    for (auto& [key, profile] : *entries) change(profile);
    ASSERT_TRUE(WriteFileAtomically(path, ProfilesToText(*entries)).ok());
  };
  edit([](ModelProfile& p) {
    for (std::vector<StageProfile>& menu : p.measured) {
      for (StageProfile& s : menu) {
        for (double* ms : {&s.costs.forward_ms, &s.costs.nograd_forward_ms, &s.costs.backward_ms}) {
          *ms *= 10;
        }
      }
    }
    p.loss.forward_ms *= 10;
    p.loss.backward_ms *= 10;
  });
  std::string progress;
  const std::vector<Prediction> slower = predict(progress);
  ASSERT_EQ(slower.size(), cold.size());
  ASSERT_EQ(slower.front().strategy, "store_all");
  EXPECT_NEAR(slower.front().step_ms, 10 * cold.front().step_ms, 1e-6 * cold.front().step_ms);
  EXPECT_EQ(slower.front().total_peak_bytes, cold.front().total_peak_bytes);

  edit([](ModelProfile& p) { p.stages.front().name += "-renamed"; });
  const std::vector<Prediction> measured_again = predict(progress);
  ASSERT_EQ(measured_again.size(), cold.size());
  for (size_t k = 0; k < cold.size(); ++k) {
    // The times measured afresh differ, and optimal may plan otherwise on them.
    if (cold[k].strategy.rfind("optimal", 0) == 0) continue;
    EXPECT_EQ(measured_again[k].plan, cold[k].plan);
    EXPECT_EQ(measured_again[k].total_peak_bytes, cold[k].total_peak_bytes);
  }
  EXPECT_NE(progress.find("is not taken (its stages are not those the model declares now)"),
            std::string::npos)
      << progress;
  predict(progress);  // the profile measured again was kept in its place
  EXPECT_NE(progress.find(kTaken), std::string::npos) << progress;

  ASSERT_TRUE(
      WriteFileAtomically(path, absl::StrCat("ckptlab-profiles ", kProfileFormat, " entries 2\n"))
          .ok());
  KeptProfiles damaged = KeptProfiles::Open(path, setting);
  EXPECT_NE(damaged.note().find(
                "set aside (profile text line 1: expected a whole number from 0 to 0, not '2')"),
            std::string::npos)
      << damaged.note();
  EXPECT_FALSE(damaged.Find(options.models.front()).has_value());
  std::ostringstream said;
  Progress progress_out(said, 0);
  damaged.Keep(options.models.front(), ModelProfile(), progress_out);
  EXPECT_EQ(said.str(), "");
  EXPECT_TRUE(ProfilesFromText(ReadRegularFile(path, 1 << 28).value()).ok());
}

// Kept profiles are a cache that never answers for something else: for any two settings of a
// question (bytes extrapolated or not, autocast, an assumed link, times measured or priced on a
// device model), the
// answer to the second in the folder where the first kept its profile is the answer to the second
// in an empty folder, to the byte (its times, where measured, measured again); and a profile kept
// under another setting is said to be set aside, naming what differs.
TEST(KeptProfiles, AWarmAnswerIsTheColdOne) {
  absl::StatusOr<ScratchFolder> dir = ScratchFolder::Make(::testing::TempDir(), "warm.");
  ASSERT_TRUE(dir.ok()) << dir.status();
  struct Setting {
    bool extrapolate = false, amp = false, timed = false;
    int64_t link_bytes_per_s = 0;
  };
  const auto draw = [] {
    Setting s;
    s.extrapolate = *rc::gen::arbitrary<bool>();
    s.amp = *rc::gen::arbitrary<bool>();
    s.timed = *rc::gen::arbitrary<bool>();
    s.link_bytes_per_s = *rc::gen::element<int64_t>(0, 1000000000);
    return s;
  };
  int folder = 0;
  const auto answer = [&](const Setting& s, const std::string& path, std::string& progress_text) {
    SweepOptions options;
    options.models = {
        BoundModel::Bind("gpt2:depth=2:hidden=16:heads=2:seq=24:batch=2:vocab=32:context=24")
            .value()};
    options.strategies =
        BindStrategies({"store_all", "recompute_all", "uniform:segments=2", "chunked_sequence"})
            .value();
    if (s.amp) options.autocast = at::kBFloat16;
    options.link_bytes_per_s = s.link_bytes_per_s;
    options.profile_times = s.timed;
    KeptProfiles kept =
        KeptProfiles::Open(path, ProfileSetting(WorkloadOptionsFor(options), s.extrapolate));
    options.kept = &kept;
    std::ostringstream progress;
    absl::StatusOr<std::vector<Prediction>> rows =
        Predict(options,
                PredictSetting{StatesSetting{}, std::nullopt, s.extrapolate,
                               s.timed ? nullptr : FindDeviceModel("h100").value()},
                Cpu(), progress);
    progress_text = progress.str();
    RC_ASSERT(rows.ok());
    for (Prediction& p : *rows) {
      if (p.status != RowStatus::kOk) RC_FAIL(p.strategy + ": " + p.error);
      if (s.timed) p.step_ms = 0;  // measured anew in each run
    }
    return PredictionCsv(*rows);
  };
  // Each case: a setting, then in turn itself and each setting that differs from it in one part,
  // asked in a folder where the first was answered, and in an empty one.
  EXPECT_TRUE(testing::CheckCases("a warm answer is the cold one", 3, [&] {
    const Setting first = draw();
    std::vector<Setting> seconds(5, first);
    seconds[1].extrapolate = !first.extrapolate;
    seconds[2].amp = !first.amp;
    seconds[3].timed = !first.timed;
    seconds[4].link_bytes_per_s = first.link_bytes_per_s == 0 ? 1000000000 : 0;
    for (size_t k = 0; k < seconds.size(); ++k) {
      const std::string warm_path = dir->Path(absl::StrCat("warm", folder, ".txt"));
      const std::string cold_path = dir->Path(absl::StrCat("cold", folder++, ".txt"));
      std::string progress;
      answer(first, warm_path, progress);
      const std::string warm = answer(seconds[k], warm_path, progress);
      const bool taken = progress.find("not measured again") != std::string::npos;
      RC_ASSERT(taken == (k == 0));
      RC_ASSERT(taken != (progress.find("was made under another setting") != std::string::npos));
      std::string cold_progress;
      RC_ASSERT(answer(seconds[k], cold_path, cold_progress) == warm);
    }
  }));
}

TEST(Predict, AShallowerCopyThatIsNotOneIsRefused) {
  // A ViT profile cannot stand for a GPT-2: its stages have no counterparts there.
  absl::StatusOr<Workload> vit = Workload::Build(testing::FixedSmallSpec("vit"), WorkloadOptions{});
  ASSERT_TRUE(vit.ok()) << vit.status();
  absl::StatusOr<const ModelProfile*> profile = vit->Profile(Cpu());
  ASSERT_TRUE(profile.ok()) << profile.status();
  const std::string gpt2 = testing::FixedSmallSpec("gpt2");
  absl::StatusOr<ModelProfile> expanded = ExpandProfile(**profile, gpt2, *ModelStages(gpt2));
  ASSERT_FALSE(expanded.ok());
  EXPECT_EQ(expanded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(expanded.status().message()).find("accepted: a shallower instance"),
            std::string::npos)
      << expanded.status();
}

// The documents' figures beside the predictions: savings of the total and of the activations
// against store_all's, the model matched by its id, strategies that failed left out.
TEST(Predict, SavingsBesidePublishedFigures) {
  auto row = [](const std::string& strategy, int64_t total, int64_t activations) {
    Prediction p;
    p.model = p.profiled = "vit:size=b16:batch=4";
    p.strategy = strategy;
    p.total_peak_bytes = total;
    p.activation_bytes = activations;
    return p;
  };
  constexpr int64_t kGiB = int64_t{1} << 30;
  std::vector<Prediction> rows = {row("store_all", 10 * kGiB, 4 * kGiB),
                                  row("uniform:segments=4", 4 * kGiB, kGiB),
                                  row("optimal:budget=auto", 0, 0)};
  rows.back().status = RowStatus::kError;
  rows.back().error = "no plan fits";
  const std::string table =
      SavingsBesidePublished(rows, {{"vit", "ViT-B/16", 12.5, 5.8}, {"llama", "LLaMA-7B", 56, 24}});
  EXPECT_NE(table.find("| ViT-B/16 | 12.5 GB, 5.8 GB (54%) | `vit:size=b16:batch=4` (float32) | "
                       "store_all | 10.74 GB | | 4295 MB | |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| | | | uniform:segments=4 | 4.29 GB | 60% | 1074 MB | 75% |"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("optimal"), std::string::npos) << table;
  EXPECT_EQ(table.find("LLaMA"), std::string::npos) << table;  // no prediction for it
  EXPECT_EQ(SavingsBesidePublished(rows, {}), "");
  // The table says when the gradients outweigh store_all's activations, and only then.
  rows[0].gradient_bytes = 5 * kGiB;
  rows[0].step_peak_bytes = 5 * kGiB + 3 * (1 << 20);
  EXPECT_NE(PredictionTable(rows).find("The gradients (5120.0 MiB, every one alive at the end of "
                                       "backward) outweigh store_all's activations (4096.0 MiB)"),
            std::string::npos)
      << PredictionTable(rows);
  EXPECT_NE(PredictionTable(rows).find("excess over them (3.0 MiB)"), std::string::npos);
  rows[0].gradient_bytes = 3 * kGiB;
  EXPECT_EQ(PredictionTable(rows).find("outweigh"), std::string::npos) << PredictionTable(rows);
  const std::string report = PredictionReport(rows, {{"vit", "ViT-B/16", 12.5, 5.8}}, "sweep x");
  EXPECT_NE(report.find("`sweep x`"), std::string::npos);
  EXPECT_NE(report.find("## Beside the documents' figures"), std::string::npos);
}

// A rank's state against an independent count on a small GPT-2 (tied embedding included) and
// llama: each parameter split as at::chunk splits it (its first chunk the largest), and
// LibTorch's own AdamW stepping over those shards, its moments counted by the meter.
TEST(TrainingState, StatesPerRankMatchAnIndependentCount) {
  for (const std::string id : {"gpt2", "llama"}) {
    SCOPED_TRACE(id);
    absl::StatusOr<testing::Case> c = testing::BuildCase(testing::FixedSmallSpec(id), 1);
    ASSERT_TRUE(c.ok()) << c.status();
    const std::vector<at::Tensor> params = c->workload->model()->Parameters();
    for (const int ranks : {1, 2, 3, 8, 1000}) {
      SCOPED_TRACE(ranks);
      int64_t whole = 0, shards = 0, moments = 0;
      {
        std::vector<at::Tensor> mine;  // rank 0's shard of each parameter, with a gradient
        for (const at::Tensor& p : params) {
          whole += p.nbytes();
          mine.push_back(p.detach().flatten().chunk(ranks).front().clone().requires_grad_(true));
          mine.back().mutable_grad() = at::ones_like(mine.back());
          shards += mine.back().nbytes();
        }
        torch::optim::AdamW adamw(mine, torch::optim::AdamWOptions(1e-3));
        const int64_t before = Cpu().Stats().live_bytes;
        adamw.step();
        moments = Cpu().Stats().live_bytes - before;
      }
      StatesSetting setting;
      setting.world_size = ranks;
      for (const StateLayout layout : {StateLayout::kReplicated, StateLayout::kZero1,
                                       StateLayout::kZero2, StateLayout::kZero3}) {
        SCOPED_TRACE(StateLayoutName(layout));
        setting.layout = layout;
        absl::StatusOr<RankStates> states = StatesPerRank(c->profile, setting);
        ASSERT_TRUE(states.ok()) << states.status();
        const bool zero3 = layout == StateLayout::kZero3;
        EXPECT_EQ(states->parameters, zero3 ? shards : whole);
        EXPECT_EQ(states->gradients, zero3 || layout == StateLayout::kZero2 ? shards : whole);
        EXPECT_EQ(states->optimizer, layout == StateLayout::kReplicated ? 2 * whole : moments);
        EXPECT_EQ(states->largest_gather > 0, zero3 && ranks > 1);
      }
    }
  }
}

// One rank's step under each layout, on generated small models and every default strategy:
// sharded gradients (zero2) leave the peak at most the gradients' bytes lower and no higher;
// zero3 gathers add at most the largest stage's gather to it; with a collective rate, store_all's
// step time gains exactly its collectives (forward and backward gathers and a reduce-scatter per
// stage under zero3, a reduce-scatter under zero2, an all-reduce when replicated), and a plan
// that reruns stages pays their gathers again.
RC_GTEST_PROP(TrainingState, RankProfilesPredictOneRanksStep, ()) {
  const std::string id = *rc::gen::elementOf(Models().Ids()).as("model");
  const std::string spec = *testing::SmallModelSpec(id).as("spec");
  absl::StatusOr<testing::Case> c = testing::BuildCase(spec, 1, true, true, /*timed=*/true);
  RC_ASSERT(c.ok());
  const int ranks = *rc::gen::inRange(2, 9).as("ranks");
  const double rate = *rc::gen::inRange(1, 1000).as("bytes per ms");
  auto setting = [&](StateLayout layout, double bytes_per_ms) {
    StatesSetting s;
    s.layout = layout;
    s.world_size = ranks;
    s.collective_bytes_per_ms = bytes_per_ms;
    return s;
  };
  auto rank = [&](StateLayout layout, double bytes_per_ms) {
    absl::StatusOr<ModelProfile> p = RankProfile(c->profile, setting(layout, bytes_per_ms));
    RC_ASSERT(p.ok());
    return *std::move(p);
  };
  const RankStates states = *StatesPerRank(c->profile, setting(StateLayout::kZero3, 0));
  for (const std::string& strategy : DefaultStrategies()) {
    absl::StatusOr<Plan> plan =
        PlanFor(testing::BudgetSpec(strategy, 1 << 30).value_or(strategy), c->profile);
    if (!plan.ok()) continue;
    RC_ASSERT(ExtendProfile(*c->workload->model(), c->workload->batch(), Cpu(),
                            c10::Device(c10::DeviceType::CPU), *plan, c->profile)
                  .ok());
    const ModelProfile r1 = rank(StateLayout::kReplicated, 0);
    const ModelProfile r2 = rank(StateLayout::kZero2, 0);
    const ModelProfile r3 = rank(StateLayout::kZero3, 0);
    const int64_t peak1 = PredictMemory(r1, *plan)->peak_bytes;
    const int64_t peak2 = PredictMemory(r2, *plan)->peak_bytes;
    const int64_t peak3 = PredictMemory(r3, *plan)->peak_bytes;
    RC_LOG() << plan->strategy << ": peaks " << peak1 << " " << peak2 << " " << peak3 << "\n";
    RC_ASSERT(peak2 <= peak1);
    RC_ASSERT(peak1 - peak2 <= c->profile.param_bytes);
    RC_ASSERT(peak3 >= peak2);
    RC_ASSERT(peak3 - peak2 <= states.largest_gather);
  }
  // Collectives in store_all's time: per stage, the parameters it takes gradients for.
  const Plan store_all = *PlanFor("store_all", c->profile);
  double whole = 0;  // the stages' parameter bytes, a tied one once per stage using it
  for (int j = 0; j < c->profile.num_stages(); ++j) {
    for (const auto& [param, bytes] : c->profile.Stored(j).param_grads) whole += bytes;
  }
  const double ring = (ranks - 1.0) / ranks * whole / rate;
  auto extra_ms = [&](StateLayout layout, const Plan& plan) {
    return *PredictStepMs(rank(layout, rate), plan) - *PredictStepMs(rank(layout, 0), plan);
  };
  RC_ASSERT(std::abs(extra_ms(StateLayout::kReplicated, store_all) - 2 * ring) <= 1e-9 * ring);
  RC_ASSERT(std::abs(extra_ms(StateLayout::kZero2, store_all) - ring) <= 1e-9 * ring);
  RC_ASSERT(std::abs(extra_ms(StateLayout::kZero3, store_all) - 3 * ring) <= 1e-9 * ring);
  // Recompute-all reruns every stage in its checkpointed segments: each rerun gathers again.
  const Plan recompute = *PlanFor("recompute_all", c->profile);
  RC_ASSERT(extra_ms(StateLayout::kZero3, recompute) >=
            extra_ms(StateLayout::kZero3, store_all) - 1e-9 * ring);
  RC_ASSERT(std::abs(extra_ms(StateLayout::kZero2, recompute) -
                     extra_ms(StateLayout::kZero2, store_all)) <= 1e-9 * ring);
}

}  // namespace
}  // namespace ckpt
