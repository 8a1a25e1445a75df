// chunked_sequence: run position-wise work in sequence chunks, each under the checkpoint
// primitive, after Mini-Sequence Transformer (Luo et al. 2024, arXiv:2407.15892).
//
// Keeps: each stage's input and output; inside position-wise stages (MLP, norms, projections,
// the LM head with its loss) only one chunk's intermediates live at a time, in forward and in
// backward. Attention stages chunk the queries, every chunk attending to all keys (keys and
// values are computed once for the whole sequence).
// Recomputes: every chunked stage once, chunk by chunk, in backward.
// Memory: a stage's intermediate peak falls about as 1/chunks (the MLP's 4x hidden, the head's
// vocabulary-wide logits); the stored boundaries stay O(L x seq x hidden). Compute: one extra
// forward of the chunked stages. Every stage whose model declares a chunkable axis (a
// kSequence part) is chunked along it: the sequence, or the batch rows of models without one.
// (GPT-2's embedding declares none: a lookup has no intermediates to save, and each chunk's
// backward would materialise a dense gradient of the whole table.)
// Parameter chunks (default 4); a count that does not divide the sequence works (the first
// chunks are one longer). A stage with fewer positions than `chunks` runs one chunk per
// position, and the plan says so: its spec records the count that runs
// ("chunked_sequence:chunks=16" for chunks=1048576 on a 16-token sequence).
// Gradients equal store_all's up to float32 reassociation: a matrix product over a chunk of
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/plan/strategy.h"
#include "strategies/plan_builders.h"

namespace ckpt {
namespace {

class ChunkedSequence : public Strategy {
 public:
  static std::vector<ParamDef> Params() {
    return {IntParam("chunks", "4", "sequence chunks per stage").Min(1).Max(1 << 20)};
  }
  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params) {
    return std::make_unique<ChunkedSequence>(static_cast<int>(params.Int("chunks")));
  }

  explicit ChunkedSequence(int chunks) : chunks_(chunks) {}

  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override {
    const int n = profile.num_stages();
    Plan plan = AllStored(n);
    int chunked = 0, most = 0;  // stages chunked, and the most chunks any runs
    for (const StageInfo& stage : profile.stages) {
      const int part = stage.FindPart(PartKind::kSequence);
      const int64_t extent = part >= 0 ? stage.parts[part].extent : 0;
      const int chunks =
          extent > 0 ? static_cast<int>(std::min<int64_t>(chunks_, extent)) : chunks_;
      plan.stage_policies.push_back(
          chunks < 2 ? StagePolicy()  // one position, or chunks=1: the stage runs whole
                     : PolicyFor(stage, PartKind::kSequence, {PartAction::Chunk(), chunks}));
      if (!plan.stage_policies.back().IsDefault()) {
        ++chunked;
        most = std::max(most, chunks);
      }
    }
    // The label says what ran: no stage chunked (no sequence, or one position) runs whole.
    const int ran = chunked > 0 ? most : 1;
    plan.shown = {{"chunks", absl::StrCat(ran)}};
    plan.summary =
        chunked == 0
            ? absl::StrCat("no stage of ", n, " has a sequence of two or more positions to ",
                           "chunk: every stage runs whole (", chunks_, " chunks asked)")
            : absl::StrCat(chunked, " of ", n, " stages run in ", ran,
                           " sequence chunks, each recomputed in backward",
                           ran < chunks_ ? absl::StrCat(" (", chunks_,
                                                        " asked; no more chunks than positions)")
                                         : "");
    return plan;
  }

 private:
  int chunks_;
};

const StrategyRegistration<ChunkedSequence> registration(
    "chunked_sequence",
    "position-wise stages and attention queries run in sequence chunks, each checkpointed "
    "(Mini-Sequence Transformer)");

}  // namespace
}  // namespace ckpt
