#include "experiments/modes.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/bytes.h"
#include "core/base/files.h"
#include "core/base/printable.h"
#include "core/base/status_macros.h"
#include "core/plan/plan_text.h"
#include "core/plan/stage.h"
#include "core/plan/strategy.h"
#include "core/run/chain_model.h"
#include "experiments/configurations.h"
#include "experiments/kept_profiles.h"
#include "experiments/output/output_folder.h"
#include "experiments/output/report.h"
#include "experiments/predict.h"
#include "experiments/presets.h"
#include "experiments/progress.h"
#include "experiments/records/cohort.h"
#include "experiments/records/results_csv.h"
#include "experiments/sweep.h"
#include "experiments/training.h"
#include "models/layers.h"

namespace ckpt {

void Say(absl::string_view text) { std::fprintf(stderr, "sweep: %s\n", Printable(text).c_str()); }

namespace {

// Text on standard output (tables, plans, the closing line), escaped but for its line breaks.
void PrintOut(absl::string_view text) {
  std::fputs(Printable(text, LineBreaks::kKeep).c_str(), stdout);
}

}  // namespace

absl::Status FlushStdout() {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    return absl::DataLossError(
        absl::StrCat("cannot write to standard output: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

namespace {

// The part actions plan text may name (PART=ACTION @ STAGES) and the kinds of parts each applies
// to, from PartActionTable; fusing where this LibTorch has no fused kernel, with why.
std::string DescribePartActions() {
  std::vector<std::pair<std::string, std::vector<std::string>>> actions;  // id, kinds
  for (const PartActionDef& def : PartActionTable()) {
    const std::string id = def.mechanism == PartMechanism::kChunks ? def.id + ":N" : def.id;
    auto it =
        std::find_if(actions.begin(), actions.end(), [&](const auto& a) { return a.first == id; });
    if (it == actions.end()) it = actions.insert(actions.end(), {id, {}});
    for (const PartKind kind : def.kinds) it->second.emplace_back(PartKindName(kind));
    if (def.mechanism == PartMechanism::kFused) {
      const std::string unavailable = FusedAttentionUnavailable(/*dropout=*/false);
      it->second.back() += absl::StrCat(
          " without dropout (scaled_dot_product_attention)",
          unavailable.empty() ? "" : absl::StrCat("; unavailable here: ", unavailable));
    }
  }
  std::string out;
  for (const auto& [id, kinds] : actions) {
    absl::StrAppend(&out, "  ", id, ": ", absl::StrJoin(kinds, ", "), "\n");
  }
  return out;
}

// The output folder the request names (or a new one), locked, with the run's record adopted
// unless the report is all that is written. A folder refused, or a record that does not match
// (--resume), is bad input.
absl::StatusOr<OutputFolder> OpenOutputFolder(const Request& request, const Machine& machine) {
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  absl::StatusOr<OutputFolder> folder = OutputFolder::Open(
      request.out, absl::StrCat(workspace != nullptr ? workspace : ".", "/results"), request.use,
      OutputsOf(request));
  if (!folder.ok()) return BadInput(folder.status());
  if (request.use != FolderUse::kReportOnly) {
    const absl::Status adopted = folder->Adopt(RecordOf(request, machine));
    if (adopted.code() == absl::StatusCode::kInvalidArgument) return BadInput(adopted);
    RETURN_IF_ERROR(adopted);
  }
  return folder;
}

// Where this process's outputs go. Rank 0 (or the one process) writes the folder's files, the
// table on standard output and the progress on standard error; another rank's sink has no folder
// and writes nothing, so that every rank runs the same code.
class Sink {
 public:
  explicit Sink(std::optional<OutputFolder> folder) : folder_(std::move(folder)) {}

  bool writes() const { return folder_.has_value(); }
  const OutputFolder& folder() const { return *folder_; }  // where writes()
  std::string dir() const { return writes() ? folder_->dir() : ""; }
  std::ostream& progress() { return writes() ? std::cerr : quiet_; }
  void Say(absl::string_view text) const {
    if (writes()) ckpt::Say(text);
  }
  void Print(absl::string_view text) const {
    if (writes()) PrintOut(text);
  }

  // Records `name` as written when `status` is OK, or its failure for Close. A picture not drawn
  // for want of gnuplot is a note, said now, not a failure.
  void Add(const std::string& name, const absl::Status& status) {
    if (status.ok()) {
      written_.push_back(name);
    } else if (status.code() == absl::StatusCode::kUnavailable) {
      Say(status.message());
    } else {
      failures_.emplace_back(status.message());
    }
  }
  // The closing line, naming what was written; the outputs that failed as one error.
  absl::Status Close() const {
    Print(absl::StrCat("results: ", dir(), " (",
                       written_.empty() ? "nothing written" : absl::StrJoin(written_, ", "),
                       ")\n"));
    if (!failures_.empty()) return absl::DataLossError(absl::StrJoin(failures_, "; "));
    return writes() ? FlushStdout() : absl::OkStatus();
  }

 private:
  std::optional<OutputFolder> folder_;
  std::ostream quiet_{nullptr};
  std::vector<std::string> written_;
  std::vector<std::string> failures_;
};

// The rows of the folder's results.csv, and their (model, strategy) pairs; a file that cannot be
// read back, or a cell that is not a spec, is bad input (a damaged file).
absl::StatusOr<std::vector<ConfigResult>> ReadRows(
    const Sink& sink, std::set<std::pair<std::string, std::string>>* pairs) {
  const std::string path = sink.folder().Path("results.csv");
  absl::StatusOr<std::vector<ConfigResult>> rows = ReadResults(path);
  if (!rows.ok()) return BadInput(rows.status());
  absl::StatusOr<std::set<std::pair<std::string, std::string>>> read = CompletedPairs(*rows);
  if (!read.ok()) {
    return BadInput(absl::InvalidArgumentError(
        absl::StrCat(path, " ", read.status().message(),
                     "; the file is damaged: mend or remove that row, or pass another --out")));
  }
  *pairs = *std::move(read);
  return rows;
}

// The sweep itself: every row appended to results.csv as it is measured, the table on stdout,
// the machine's GEMM rate into `info`. A rank other than 0 measures alike and writes nothing.
absl::Status Measure(const SweepOptions& options, MemoryMeter& meter, Sink& sink, RunInfo& info) {
  std::optional<CsvAppender> csv;
  if (sink.writes()) {  // one rank's threads, with the others waiting, not competing
    absl::StatusOr<double> gemm = MeasureGemmGflops(options.device);
    if (gemm.ok()) info.gemm_gflops = *gemm;
    ASSIGN_OR_RETURN(CsvAppender opened, OpenResults(sink.folder().Path("results.csv")));
    csv.emplace(std::move(opened));
  }
  ASSIGN_OR_RETURN(const std::vector<ConfigResult> results,
                   RunSweep(
                       options, meter,
                       [&](const ConfigResult& r) {
                         return csv ? csv->Write(ResultCells(r)) : absl::OkStatus();
                       },
                       sink.progress()));
  sink.Print(absl::StrCat(FormatTable(results), "\n"));
  sink.Add("results.csv", absl::OkStatus());
  return absl::OkStatus();
}

// The report's opening notes: that it was written with --report_only, and its section on models
// with no rows (the time limit was spent, or --report_only found a partial results.csv), also
// said on stderr; empty when neither applies.
std::string OpeningNotes(const SweepOptions& options, const std::vector<std::string>& missing,
                         bool report_only, const std::string& dir) {
  std::string out;
  if (report_only) {
    out = absl::StrCat("This report was written with --report_only from ", dir,
                       "/results.csv as an earlier sweep left it; the machine and runtime above "
                       "are those of the report's run.\n\n");
  }
  if (missing.empty()) return out;
  Say(absl::StrCat("incomplete, ", missing.size(),
                   " model(s) not run; continue with --resume --out=", dir));
  const std::string why =
      report_only ? "results.csv has no complete rows for "
                  : absl::StrCat("The time limit (--time_limit_s=", options.time_limit_s,
                                 ") was spent before ");
  return absl::StrCat(out, "## Incomplete\n\n", why, missing.size(), " of ", options.models.size(),
                      report_only ? " models: " : " models started: ", absl::StrJoin(missing, ", "),
                      ".", report_only ? "" : " Training and the depth scan were skipped.",
                      " Continue with the sweep's command and `--resume --out=", dir, "`.\n\n");
}

// Trains every model under every strategy; on rank 0 writes the curves and their plot and adds
// the training section to `appendix`. False when a curve departs from store_all's.
absl::StatusOr<bool> TrainAndWriteCurves(const SweepOptions& options,
                                         const TrainingOptions& training, MemoryMeter& meter,
                                         Sink& sink, std::string& appendix) {
  ASSIGN_OR_RETURN(const std::vector<LossCurve> curves,
                   RunTraining(options, training, meter, sink.progress()));
  if (!sink.writes()) return true;
  sink.Add("losses.csv, loss.png", WriteLossCurves(sink.dir(), curves));
  appendix += TrainingReport(training, curves);
  bool ok = true;
  for (const LossCurve& c : curves) {
    ok = ok && !c.departs;
    if (c.strategy == "store_all" && c.status != RowStatus::kOk) {
      Say(absl::StrCat("training: store_all's curve of ", c.model, " is ", RowStatusName(c.status),
                       " (", c.message, "); the other curves of the model were not compared"));
    }
  }
  return ok;
}

// After the rows: training, then the report and plots from every row of results.csv (a resumed
// sweep's earlier ones too), then the depth scan. Rank 0 writes; the others train alike.
absl::Status Report(const Request& request, const Machine& machine, const Cohort& cohort,
                    Sink& sink, RunInfo& info) {
  const SweepOptions& options = request.options;
  const bool report_only = request.use == FolderUse::kReportOnly;
  std::vector<ConfigResult> rows;
  std::vector<std::string> missing;
  std::string appendix;
  if (sink.writes()) {
    std::set<std::pair<std::string, std::string>> pairs;
    ASSIGN_OR_RETURN(rows, ReadRows(sink, &pairs));
    for (const BoundModel& model : options.models) {
      if (!HasEveryRow(model.spec(), options.strategies, pairs)) missing.push_back(model.spec());
    }
    appendix = OpeningNotes(options, missing, report_only, sink.dir());
  }
  ASSIGN_OR_RETURN(const std::string complete,
                   cohort.FromRankZero(missing.empty() ? "complete" : "incomplete"));
  bool curves_ok = true;
  if (request.training.steps > 0 && complete == "complete") {
    ASSIGN_OR_RETURN(
        curves_ok, TrainAndWriteCurves(options, request.training, *machine.meter, sink, appendix));
  }
  if (!sink.writes()) return absl::OkStatus();  // the rest is rank 0's alone
  // The plot first, so that the report can say why a picture is missing.
  const absl::Status plot = WriteParetoPlot(sink.dir(), rows);
  if (!plot.ok()) {
    appendix = absl::StrCat("pareto.png was not drawn: ", plot.message(),
                            ". `gnuplot pareto.gp` in this folder draws it.\n\n", appendix);
  }
  sink.Add("report.md", WriteReport(sink.dir(), rows, info, appendix));
  sink.Add("pareto.png", plot);
  if (!request.depths.empty() && complete == "complete") {
    ASSIGN_OR_RETURN(const std::vector<DepthPoint> points,
                     RunDepthScan(options, request.depths, *machine.meter, std::cerr));
    sink.Add("depth.csv, depth.png", WriteDepthPlot(sink.dir(), points));
  }
  if (!curves_ok) return absl::AbortedError("a loss curve departs from store_all's");
  return absl::OkStatus();
}

}  // namespace

absl::Status List() {
  PrintOut(absl::StrCat("presets: ", absl::StrJoin(PresetNames(), ", "), "\n\nstrategies:\n",
                        Strategies().Describe(), "\nmodels:\n", Models().Describe(),
                        "\npart actions (plan text: PART=ACTION @ STAGES):\n",
                        DescribePartActions()));
  return FlushStdout();
}

absl::Status Explain(const SweepOptions& options, MemoryMeter& meter) {
  std::ostream quiet(nullptr);
  Progress progress(quiet, 0);
  return ForEachModel(
      options.models, options.strategies, LoopOptions(WorkloadOptionsFor(options)), meter, progress,
      [&](PreparedModel& m) -> absl::Status {
        RETURN_IF_ERROR(m.status);
        const ModelProfile& profile = m.profile;
        std::string out = absl::StrFormat("%s (%d stages)\n", profile.model, profile.num_stages());
        for (const Configuration& c : m.configurations) {
          if (!c.status.ok()) {
            absl::StrAppend(&out, "  ", c.strategy->spec(), ": ", Printable(c.status.message()),
                            "\n");
            continue;
          }
          const PlannedRun& run = *c.run;
          absl::StrAppendFormat(
              &out,
              "  %s: %s\n    predicted: %s MiB of activations after forward, peak %s "
              "MiB above the baseline; %lld stage forwards rerun in backward\n",
              run.plan.strategy, run.plan.summary, FormatMib(run.predicted.activation_bytes, 2),
              FormatMib(run.predicted.peak_bytes, 2),
              static_cast<long long>(run.executor.program().RecomputedStages()));
          // The plan as text (a plan file can hold it: docs/plans.md), then as a tree.
          absl::StrAppend(&out, "    plan: ", PlanToText(run.plan, profile.stages), "\n");
          for (absl::string_view line :
               absl::StrSplit(PlanToTree(run.plan, profile.stages), '\n', absl::SkipEmpty())) {
            absl::StrAppend(&out, "    ", line, "\n");
          }
        }
        PrintOut(out);
        return absl::OkStatus();
      });
}

// The profiles kept in `folder` for runs of `options`, their bytes extrapolated or not
// (profiles.txt); why a file was set aside, said.
KeptProfiles OpenKeptProfiles(const OutputFolder& folder, const SweepOptions& options,
                              bool extrapolate) {
  KeptProfiles kept = KeptProfiles::Open(folder.Path(KeptProfiles::kFile),
                                         ProfileSetting(WorkloadOptionsFor(options), extrapolate));
  if (!kept.note().empty()) Say(kept.note());
  return kept;
}

absl::Status PredictAll(const Request& request, const Machine& machine) {
  ASSIGN_OR_RETURN(const OutputFolder folder, OpenOutputFolder(request, machine));
  SweepOptions options = request.options;
  options.profile_times = request.device_model == nullptr;  // else its prices are the times
  KeptProfiles kept = OpenKeptProfiles(folder, options, request.extrapolate);
  options.kept = &kept;
  ASSIGN_OR_RETURN(const std::vector<Prediction> rows,
                   Predict(options,
                           PredictSetting{request.states, request.device_memory,
                                          request.extrapolate, request.device_model},
                           *machine.meter, std::cerr));
  RETURN_IF_ERROR(WriteFileAtomically(folder.Path("predict.csv"), PredictionCsv(rows)));
  RETURN_IF_ERROR(WriteFileAtomically(
      folder.Path("predict.md"),
      Printable(PredictionReport(rows, request.published, request.command), LineBreaks::kKeep)));
  PrintOut(absl::StrCat(PredictionTable(rows), "\nresults: ", folder.dir(),
                        " (predict.csv, predict.md)\n"));
  return FlushStdout();
}

absl::Status Sweep(Request& request, const Machine& machine, Ranks& ranks) {
  SweepOptions& options = request.options;
  // Under a launcher the ranks meet first, so that a run that cannot form writes nothing; with
  // --nproc the folder is checked before any rank is started.
  if (request.launched) {
    RETURN_IF_ERROR(ranks.Join(request, machine, request.arguments));
  }
  std::optional<OutputFolder> folder;
  if (request.ranks.rank == 0) {
    ASSIGN_OR_RETURN(OutputFolder opened, OpenOutputFolder(request, machine));
    folder.emplace(std::move(opened));
  }
  Sink sink(std::move(folder));
  if (sink.writes() && sink.folder().has_results()) {
    RETURN_IF_ERROR(ReadRows(sink, &options.completed).status());
  }
  if (!request.launched) {
    RETURN_IF_ERROR(ranks.Join(request, machine, request.arguments));
  }
  options.group = ranks.group.get();
  const Cohort cohort(options.group);
  ASSIGN_OR_RETURN(options.completed, cohort.FromRankZero(options.completed));
  RunInfo info;
  if (sink.writes()) {
    info = DescribeRun(request, machine, sink.folder());
    Say(absl::StrCat(info.runtime, "; memory: ", info.meter,
                     request.ranks.world_size > 1
                         ? absl::StrCat("; ", request.ranks.world_size, " ranks (",
                                        options.group->backend(), ")")
                         : ""));
  }
  std::optional<KeptProfiles> kept;
  if (request.use != FolderUse::kReportOnly) {
    // One process keeps its profiles (the ranks of several plan from their mean profile).
    if (sink.writes() && request.ranks.world_size == 1) {
      kept.emplace(OpenKeptProfiles(sink.folder(), options, /*extrapolate=*/false));
      options.kept = &*kept;
    }
    RETURN_IF_ERROR(Measure(options, *machine.meter, sink, info));
  }
  const absl::Status reported = Report(request, machine, cohort, sink, info);
  if (!sink.writes()) return reported;
  RETURN_IF_ERROR(ranks.Wait());  // the others are done: they end on their own, or are ended
  const absl::Status closed = sink.Close();
  if (reported.ok()) return closed;
  if (!closed.ok()) Say(closed.message());
  return reported;
}

}  // namespace ckpt
