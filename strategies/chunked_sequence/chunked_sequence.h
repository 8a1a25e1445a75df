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
// rows may block its sums differently from one over all rows.
#pragma once

#include <memory>
#include <vector>

#include "core/plan/strategy.h"

namespace ckpt {

class ChunkedSequence : public Strategy {
 public:
  static constexpr char kId[] = "chunked_sequence";
  static constexpr char kSummary[] =
      "position-wise stages and attention queries run in sequence chunks, each checkpointed "
      "(Mini-Sequence Transformer)";
  static std::vector<ParamDef> Params();
  static absl::StatusOr<std::unique_ptr<Strategy>> Create(const ParamValues& params);

  explicit ChunkedSequence(int chunks) : chunks_(chunks) {}
  absl::StatusOr<Plan> MakePlan(const ModelProfile& profile) const override;

 private:
  int chunks_;
};

}  // namespace ckpt
