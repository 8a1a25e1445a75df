// chain: any PyTorch model, cut into stages by python/ckptlab's ckptlab.chain and written by
// Chain.save, its batch inside.
//
//   chain:file=gpt.pt
//
// The stages are the top module's children, traced, read as the torchscript family reads its
// files (models/torchscript.h, which runs them); the batch is the top module's buffers
// ckptlab_batch_0, 1, ... (stage 0's arguments, the same every step, the floating-point ones
// requiring grad); the last stage returns the loss, the model's own. A trace is specialised to
// its batch's shapes: a file that ckptlab.chain(..., ranks=N) cut on 1/N of the batch's rows
// (its buffer ckptlab_ranks holds N) runs on N ranks, each stepping its share of the rows, and
// on no other count (core/run/workload.h).
#include <memory>
#include <vector>

#include "core/plan/spec.h"
#include "core/run/chain_model.h"
#include "models/torchscript.h"

namespace ckpt {
namespace {

class ChainFileModel {
 public:
  static std::vector<ParamDef> Params() {
    return {TextParam("file", "",
                      "the file Chain.save wrote, its batch inside (runs its code: load only "
                      "files you trust)")};
  }
  static absl::Status Check(const ParamValues& params) {
    return TorchScriptFactsFor(params).status();
  }
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context) {
    return CreateTorchScriptModel(params, context);
  }
  static std::vector<std::string> PaperSpecs() { return {}; }
  // No small_spec: the tests generate their files (testing/torchscript_chains.h).
  static std::vector<StageInfo> StagesFor(const ParamValues& params) {
    absl::StatusOr<TorchScriptFacts> facts = TorchScriptFactsFor(params);
    return facts.ok() ? facts->stages : std::vector<StageInfo>{};
  }
  static std::string ContentDigest(const ParamValues& params) {
    return TorchScriptContentDigest(params);
  }
  static int BatchRanks(const ParamValues& params) {
    absl::StatusOr<TorchScriptFacts> facts = TorchScriptFactsFor(params);
    return facts.ok() ? facts->ranks : 1;
  }
};

const ModelRegistration<ChainFileModel> registration(
    "chain",
    "any PyTorch model, cut by ckptlab.chain and saved with its batch (python/ckptlab); loss: "
    "the model's own, which its last stage returns",
    /*quick_spec=*/"");

}  // namespace
}  // namespace ckpt
