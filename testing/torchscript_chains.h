// TorchScript chains made in C++ for the tests of the `torchscript` model family, written as
// torch.jit.save writes them: a module whose children are the stages, each compiled from
// TorchScript source (Module::define), so no Python is needed. The stage kinds cover what the
// family reads from a graph and what users' models hold: plain linear blocks (identical ones
// share a repeat key), dropout (stochastic), random numbers drawn without a Generator argument,
// BatchNorm written out with running statistics and a counter updated in place (updates state),
// a counter the stage reads after updating it, a stage returning a tuple and one taking two
// tensors, one taking a tuple whole (as nn.Sequential passes it), outputs that share storage (a
// tensor returned twice, the input returned beside a new tensor, a view of the input, the input
// itself, a zero-element view keeping its base alive), an in-place write to the input, a used
// zero-element parameter, and an embedding and vocabulary head for token batches.
//
//   std::string spec = testing::SmallTorchScriptSpec(choose);  // "torchscript:file=/tmp/...:..."
//   std::string file = testing::SmallChainFileSpec(choose);    // "chain:file=/tmp/..."
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/plan/spec.h"

namespace ckpt::testing {

enum class StageKind {
  kLinear,
  kDropout,
  kBatchNorm,
  kFork,  // (tanh(x), x * 0.5)
  kJoin,  // (a, b) -> a * b + a
  kEmbedding,
  kHead,
  kRandom,          // x + randn_like(x), columns in randperm's order
  kCounter,         // a counter buffer, updated in training, then read: x * count
  kTwice,           // (tanh(x), the same tensor)
  kPassThrough,     // (x, tanh(x)): the input returned beside a new tensor
  kTupleJoin,       // (a, b) taken as one tuple -> a * b + a
  kView,            // x.view(rows, -1): a view of the input
  kFlatten,         // flatten(x, 1): the input itself
  kEmptySlice,      // (relu(x), x[:, :0]): a zero-element view of the input
  kEmptyJoin,       // (a, b) -> a + b.sum()
  kInPlace,         // tanh(x.mul_(2)): the input written in place
  kEmptyParameter,  // x + p.sum() for a parameter p of no elements
  kConcat,          // tanh(cat([token, x], 1)), a token of `width` features: x's gradient a
                    // strided view into the concatenation's
  kLoss,            // x.pow(2).mean(): a chain file's last stage returns the loss
};

// A chain to write: stage kinds in order with the feature width each one outputs.
struct ChainDescription {
  bool tokens = false;  // token ids in (an embedding first) or features in
  int64_t input = 4;    // features per example, or ids per example
  int64_t vocab = 0;    // with tokens
  struct Stage {
    StageKind kind = StageKind::kLinear;
    int64_t width = 4;  // what it outputs per position
  };
  std::vector<Stage> stages;
  int64_t file_batch = 0;    // rows of a batch kept in the file (chain:file=); 0: none
  bool empty_batch = false;  // a batch of no rows in the file instead (which Chain.save refuses)
  int64_t ranks = 0;         // the ranks that share those rows (buffer ckptlab_ranks); 0: none
  std::string writer;        // the writer's torch release recorded, as Chain.save does; "": none
};

// Writes `chain` as a TorchScript archive at `path`, parameters (and a file batch, as the top
// module's buffer ckptlab_batch_0, with its ranks) drawn from `seed`.
absl::Status WriteChain(const ChainDescription& chain, uint64_t seed, const std::string& path);

// A small chain of every kind drawn through `choose`, written to a file in a folder this test
// process owns (removed at exit), and its spec: what ModelTraits::small_spec would return.
std::string SmallTorchScriptSpec(const SpecChooser& choose);
// The same chains ending in a loss stage, their batch in the file for `ranks` ranks (the rows the
// chooser picks for each): "chain:file=/tmp/...".
std::string SmallChainFileSpec(const SpecChooser& choose, int ranks = 1);

}  // namespace ckpt::testing
