// torchscript: the user's own model, read from a file that torch.jit.save wrote of a scripted or
// traced nn.Sequential. Each child module is a stage, in order; stage i takes what stage i-1
// returned (a tensor, or a tuple or list of tensors), stage 0 the batch.
//
//   torchscript:file=cnn.pt:input=3x32x32:classes=10:batch=8     images, cross-entropy
//   torchscript:file=gpt.pt:tokens=128:vocab=512:batch=4         next-token cross-entropy
//
// The batch: `input` (a floating-point tensor per example, in the run's default dtype, which
// requires grad) or `tokens` (int64 ids in [0, vocab) per example, the targets the next ids).
// The loss: cross-entropy where the last stage's output is [batch, classes] (with `classes`)
// or [batch, tokens, vocab]; otherwise the mean of its squares.
//
// The same code reads the `chain` family's files (models/chain.cc), told apart by the spec's name.
//
// What the executor must know of a stage is read from the module (ReadStageFacts), never asked:
// whether its forward draws random numbers (an op taking a Generator, or dropout: RNG replay),
// whether it updates module state (an in-place op on a buffer, BatchNorm's running statistics:
// the state is put back after a rerun, so every plan trains it as store_all does), and which
// stages are alike (the same code on parameters and inputs of the same shapes: one repeat key,
// profiled once). A stage declares no parts.
//
// A file that records the torch that wrote it (Chain.save: the archive's extra file
// ckptlab_torch) is refused, before LibTorch reads it, where that torch is newer in major.minor
// than the LibTorch this program is built against: an older LibTorch may misread a newer one's
// TorchScript without an error (the archive's format version does not always change).
//
// Loading a TorchScript file runs the code in it, as torch.jit.load does: load only files you
// trust. The file is read once per process through the file policy (core/base/files.h); its
// parameters are the file's (the run's seed draws only the batch). The JIT's graph executor is
// pinned to run graphs unoptimised (setGraphExecutorOptimize(false)), so that it never fuses or
// differentiates a graph of its own after a few runs: what a stage saves for backward is what
// its ops save, the same in the profile and in every step (docs/torchscript.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/plan/spec.h"
#include "core/plan/stage.h"
#include "core/run/chain_model.h"

namespace ckpt {

// Dimensions written "3x224x224": 1 to 8 positive integers, the product at most 2^40.
// InvalidArgument naming the text and what is accepted otherwise.
absl::StatusOr<std::vector<int64_t>> ParseShape(absl::string_view text);

// A torch release as torch.__version__ spells it ("2.15.0+cu132", "1.13.1", "2.6.0a0+git1eba"):
// its major and minor numbers, each of 1 to 4 digits, then anything. InvalidArgument naming the
// text (escaped) otherwise.
struct TorchRelease {
  int major = 0;
  int minor = 0;
};
absl::StatusOr<TorchRelease> ParseTorchRelease(absl::string_view text);

// How the loss reads the last stage's output (kOutput: it is the loss, a chain file's).
enum class TorchScriptLoss { kCrossEntropy, kMeanSquare, kOutput };

// How a stage is called with the tensors the stage before returned: as nn.Sequential passes
// them (whole: a tuple or a list) where its forward takes one argument of that type, else one
// tensor per argument.
enum class TorchScriptPacking { kSpread, kTuple, kList };

// What ckptlab reads from a TorchScript file for a spec: the stages, how each is called, and the
// loss.
struct TorchScriptFacts {
  std::vector<StageInfo> stages;
  std::vector<TorchScriptPacking> packing;  // per stage
  // Per stage, the indices of the input tensors its forward writes in place (x.mul_(2), an
  // in-place ReLU): it is handed copies of those, so that what the executor and the
  // checkpoints hold keeps its value for reruns, and gradients are the plain model's.
  std::vector<std::vector<int>> written_inputs;
  TorchScriptLoss loss = TorchScriptLoss::kMeanSquare;
  std::vector<int64_t> output_shape;  // the last stage's first output, for the batch checked
  // A chain file's: the ranks its batch is for (its buffer ckptlab_ranks; none: 1), each
  // stepping 1/ranks of the rows, on which its stages were traced (and Check runs rank 0's).
  int ranks = 1;
  std::string file_digest;  // of the file's bytes (ModelTraits::content_digest)
};

// What Check reads of the file that `params` name (a torchscript or chain spec's parameters),
// read once per spec and kept for the process: InvalidArgument as Check's.
absl::StatusOr<TorchScriptFacts> TorchScriptFactsFor(const ParamValues& params);

// A digest of the file `params` name, as read for its facts ("" where they cannot be read).
std::string TorchScriptContentDigest(const ParamValues& params);

// The model that `params` name (their facts read), on the context's device.
absl::StatusOr<std::shared_ptr<ChainModel>> CreateTorchScriptModel(const ParamValues& params,
                                                                   const ModelContext& context);

}  // namespace ckpt
