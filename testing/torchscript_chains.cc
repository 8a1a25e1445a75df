#include "testing/torchscript_chains.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/ops/ones.h"
#include "ATen/ops/randint.h"
#include "ATen/ops/randn.h"
#include "ATen/ops/scalar_tensor.h"
#include "ATen/ops/zeros.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/files.h"
#include "core/run/torch_status.h"
#include "torch/csrc/jit/api/module.h"

namespace ckpt::testing {
namespace {

constexpr char kLinear[] = R"(
def forward(self, x):
    return torch.relu(torch.matmul(x, self.weight) + self.bias)
)";
constexpr char kDropout[] = R"(
def forward(self, x):
    return torch.dropout(torch.matmul(x, self.weight) + self.bias, 0.25, self.training)
)";
constexpr char kBatchNorm[] = R"(
def forward(self, x):
    if self.training:
        self.num_batches_tracked.add_(1)
    return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var,
                            self.training, 0.1, 1e-05, False)
)";
constexpr char kFork[] = R"(
def forward(self, x):
    return (torch.tanh(x), x * 0.5)
)";
constexpr char kJoin[] = R"(
def forward(self, a, b):
    return a * b + a
)";
constexpr char kRandom[] = R"(
def forward(self, x):
    return x[:, torch.randperm(x.size(1))] + 0.1 * torch.randn_like(x)
)";
constexpr char kCounter[] = R"(
def forward(self, x):
    if self.training:
        self.count.add_(1.0)
    return x * self.count
)";
constexpr char kTwice[] = R"(
def forward(self, x):
    y = torch.tanh(x)
    return (y, y)
)";
constexpr char kPassThrough[] = R"(
def forward(self, x):
    return (x, torch.tanh(x))
)";
constexpr char kTupleJoin[] = R"(
def forward(self, t: Tuple[Tensor, Tensor]):
    return t[0] * t[1] + t[0]
)";
constexpr char kView[] = R"(
def forward(self, x):
    return x.view(x.size(0), -1)
)";
constexpr char kFlatten[] = R"(
def forward(self, x):
    return torch.flatten(x, 1)
)";
constexpr char kEmptySlice[] = R"(
def forward(self, x):
    return (torch.relu(x), x[:, :0])
)";
constexpr char kEmptyJoin[] = R"(
def forward(self, a, b):
    return a + b.sum()
)";
constexpr char kInPlace[] = R"(
def forward(self, x):
    return torch.tanh(x.mul_(2.0))
)";
constexpr char kEmptyParameter[] = R"(
def forward(self, x):
    return x + self.nothing.sum()
)";
constexpr char kConcat[] = R"(
def forward(self, x):
    return torch.tanh(torch.cat([self.token.expand(x.size(0), -1), x], 1))
)";
constexpr char kEmbedding[] = R"(
def forward(self, ids):
    return torch.embedding(self.weight, ids)
)";
constexpr char kHead[] = R"(
def forward(self, x):
    return torch.matmul(x, self.weight)
)";
constexpr char kLoss[] = R"(
def forward(self, x):
    return x.pow(2).mean()
)";

torch::jit::Module NewModule(const std::shared_ptr<torch::jit::CompilationUnit>& cu,
                             const std::string& name) {
  torch::jit::Module m(c10::QualifiedName("__torch__." + name), cu);
  m.register_attribute("training", c10::BoolType::get(), true);
  return m;
}

torch::jit::Module MakeStage(const std::shared_ptr<torch::jit::CompilationUnit>& cu, int index,
                             const ChainDescription::Stage& stage, int64_t in, int64_t vocab,
                             at::Generator& gen) {
  const auto param = [&](torch::jit::Module& m, const char* name, at::IntArrayRef shape) {
    m.register_parameter(name, at::randn(shape, gen).mul_(0.5).requires_grad_(true),
                         /*is_buffer=*/false);
  };
  torch::jit::Module m = NewModule(cu, absl::StrCat("Stage", index));
  switch (stage.kind) {
    case StageKind::kLinear:
    case StageKind::kDropout:
      param(m, "weight", {in, stage.width});
      param(m, "bias", {stage.width});
      m.define(stage.kind == StageKind::kLinear ? kLinear : kDropout);
      break;
    case StageKind::kBatchNorm:
      param(m, "weight", {in});
      param(m, "bias", {in});
      m.register_buffer("running_mean", at::zeros({in}));
      m.register_buffer("running_var", at::ones({in}));
      m.register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
      m.define(kBatchNorm);
      break;
    case StageKind::kFork:
      m.define(kFork);
      break;
    case StageKind::kJoin:
      m.define(kJoin);
      break;
    case StageKind::kEmbedding:
      param(m, "weight", {vocab, stage.width});
      m.define(kEmbedding);
      break;
    case StageKind::kRandom:
      m.define(kRandom);
      break;
    case StageKind::kCounter:
      m.register_buffer("count", at::ones({}));
      m.define(kCounter);
      break;
    case StageKind::kTwice:
      m.define(kTwice);
      break;
    case StageKind::kPassThrough:
      m.define(kPassThrough);
      break;
    case StageKind::kTupleJoin:
      m.define(kTupleJoin);
      break;
    case StageKind::kView:
      m.define(kView);
      break;
    case StageKind::kFlatten:
      m.define(kFlatten);
      break;
    case StageKind::kEmptySlice:
      m.define(kEmptySlice);
      break;
    case StageKind::kEmptyJoin:
      m.define(kEmptyJoin);
      break;
    case StageKind::kInPlace:
      m.define(kInPlace);
      break;
    case StageKind::kEmptyParameter:
      param(m, "nothing", {0});
      m.define(kEmptyParameter);
      break;
    case StageKind::kConcat:
      param(m, "token", {1, stage.width});
      m.define(kConcat);
      break;
    case StageKind::kHead:
      param(m, "weight", {in, vocab});
      m.define(kHead);
      break;
    case StageKind::kLoss:
      m.define(kLoss);
      break;
  }
  return m;
}

// Widths of stages with parameters of their own are their own; the others keep their input's.
int64_t OutputWidth(const ChainDescription::Stage& stage, int64_t in, int64_t vocab) {
  switch (stage.kind) {
    case StageKind::kLinear:
    case StageKind::kDropout:
    case StageKind::kEmbedding:
      return stage.width;
    case StageKind::kHead:
      return vocab;
    case StageKind::kConcat:
      return in + stage.width;
    default:
      return in;
  }
}

std::mutex folder_mutex;
// The folder this process writes its chains to, and what it wrote there (by name).
struct Written {
  std::optional<ScratchFolder> folder;
  std::map<std::string, std::string> paths;
};
// Destroyed at exit, with the folder and the files in it.
Written& Files() {
  static Written written;
  return written;
}

}  // namespace

absl::Status WriteChain(const ChainDescription& chain, uint64_t seed, const std::string& path) {
  return RunTorch([&] {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    auto cu = std::make_shared<torch::jit::CompilationUnit>();
    torch::jit::Module top = NewModule(cu, "Chain");
    int64_t in = chain.input;
    for (size_t i = 0; i < chain.stages.size(); ++i) {
      top.register_module(absl::StrCat(i), MakeStage(cu, static_cast<int>(i), chain.stages[i], in,
                                                     chain.vocab, gen));
      in = OutputWidth(chain.stages[i], in, chain.vocab);
    }
    if (chain.file_batch > 0 || chain.empty_batch) {
      const int64_t rows = chain.empty_batch ? 0 : chain.file_batch;
      top.register_buffer("ckptlab_batch_0",
                          chain.tokens ? at::randint(chain.vocab, {rows, chain.input}, gen,
                                                     at::TensorOptions().dtype(at::kLong))
                                       : at::randn({rows, chain.input}, gen));
    }
    if (chain.ranks != 0)
      top.register_buffer("ckptlab_ranks", at::scalar_tensor(chain.ranks, at::kLong));
    torch::jit::ExtraFilesMap extra;
    if (!chain.writer.empty()) extra["ckptlab_torch"] = chain.writer;
    top.save(path, extra);
  });
}

namespace {

// A small chain of every kind drawn through `choose`, as SmallTorchScriptSpec's header says, and
// what its spec needs besides the file.
struct SmallChain {
  ChainDescription chain;
  int64_t batch = 1;
  bool classes = false;
  int64_t width = 0;  // what the last stage outputs per example
  uint64_t seed = 0;
};

SmallChain DrawSmallChain(const SpecChooser& choose) {
  ChainDescription chain;
  // (FixedSmallSpec picks each range's second value: features in, two BatchNorm stages, so that
  // the tests that need a model with state find one here.)
  chain.tokens = choose("token ids in", 0, 1) == 0;
  chain.input = choose(chain.tokens ? "ids per example" : "input features", 1, 5);
  chain.vocab = chain.tokens ? choose("vocab", 2, 9) : 0;
  if (chain.tokens)
    chain.stages.push_back({StageKind::kEmbedding, choose("embedding width", 1, 5)});
  const int64_t middle = choose("middle stages", chain.tokens ? 0 : 1, 5);
  bool batch_norm = false;
  // (testing::SmallModelSpec answers 0 where the test asks for no dropout.)
  const bool dropout = choose("dropout stages", 0, 1) == 1;
  for (int64_t i = 0; i < middle; ++i) {
    // 0 linear, 1 BatchNorm (over features only: its channels are dimension 1) or dropout,
    // 2 fork and join, 3 dropout, 4 random numbers (3 and 4 linear without dropout), 5 a
    // counter read after its update, 6 a tensor returned twice, 7 the input returned beside a
    // new one (both taken as a tuple), 8 a view of the input and 9 the input itself (over
    // features only: they flatten), 10 a zero-element view of the input, 11 an in-place write to
    // the input, 12 a zero-element parameter, 13 a linear stage, then a concatenation (features
    // only): the linear stage's backward gets its gradient as a strided view into the
    // concatenation's.
    int64_t k = choose(absl::StrCat("stage ", i, " kind"), 0, 13);
    if (k == 1 && chain.tokens) k = 3;
    if ((k == 3 || k == 4) && !dropout) k = 0;
    if ((k == 8 || k == 9 || k == 13) && chain.tokens) k = 0;
    const int64_t width = choose(absl::StrCat("stage ", i, " width"), 1, 5);
    switch (k) {
      case 0:
        chain.stages.push_back({StageKind::kLinear, width});
        break;
      case 1:
        chain.stages.push_back({StageKind::kBatchNorm, 0});
        batch_norm = true;
        break;
      case 2:
        chain.stages.push_back({StageKind::kFork, 0});
        chain.stages.push_back({StageKind::kJoin, 0});
        break;
      case 3:
        chain.stages.push_back({StageKind::kDropout, width});
        break;
      case 4:
        chain.stages.push_back({StageKind::kRandom, 0});
        break;
      case 5:
        chain.stages.push_back({StageKind::kCounter, 0});
        break;
      case 6:
        chain.stages.push_back({StageKind::kTwice, 0});
        chain.stages.push_back({StageKind::kTupleJoin, 0});
        break;
      case 7:
        chain.stages.push_back({StageKind::kPassThrough, 0});
        chain.stages.push_back({StageKind::kTupleJoin, 0});
        break;
      case 8:
        chain.stages.push_back({StageKind::kView, 0});
        break;
      case 9:
        chain.stages.push_back({StageKind::kFlatten, 0});
        break;
      case 10:
        chain.stages.push_back({StageKind::kEmptySlice, 0});
        chain.stages.push_back({StageKind::kEmptyJoin, 0});
        break;
      case 11:
        chain.stages.push_back({StageKind::kInPlace, 0});
        break;
      case 12:
        chain.stages.push_back({StageKind::kEmptyParameter, 0});
        break;
      default:
        chain.stages.push_back({StageKind::kLinear, width});
        chain.stages.push_back({StageKind::kConcat, width});
        break;
    }
  }
  if (chain.tokens) chain.stages.push_back({StageKind::kHead, 0});
  // A stage with parameters first: before one, on a batch that takes no gradient, a stored
  // stage's input needs none in a step, which the profile does not see (the profiler's
  // PrepareInputs, docs/torchscript.md).
  const StageKind first = chain.stages.front().kind;
  if (!chain.tokens && first != StageKind::kLinear && first != StageKind::kDropout &&
      first != StageKind::kBatchNorm) {
    chain.stages.insert(chain.stages.begin(), {StageKind::kLinear, choose("first width", 1, 5)});
  }
  // A BatchNorm in training needs two values per channel.
  const int64_t batch = choose("batch", batch_norm ? 2 : 1, 4);
  int64_t width = chain.input;
  for (const ChainDescription::Stage& s : chain.stages) width = OutputWidth(s, width, chain.vocab);
  const bool classes = !chain.tokens && width >= 2 && choose("cross-entropy", 0, 1) == 1;
  const uint64_t seed = static_cast<uint64_t>(choose("parameter seed", 0, 1 << 20));
  return {std::move(chain), batch, classes, width, seed};
}

// The path of `chain` written with `seed` in this process's folder (written once per chain).
std::string WrittenChain(const ChainDescription& chain, uint64_t seed) {
  std::string key = absl::StrCat(chain.tokens, "_", chain.input, "_", chain.vocab, "_", seed, "_",
                                 chain.file_batch, "_", chain.ranks);
  for (const ChainDescription::Stage& s : chain.stages) {
    absl::StrAppend(&key, "_", static_cast<int>(s.kind), "x", s.width);
  }
  std::lock_guard<std::mutex> lock(folder_mutex);
  Written& files = Files();
  if (!files.folder) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    absl::StatusOr<ScratchFolder> folder =
        ScratchFolder::Make(tmp != nullptr ? tmp : "/tmp", "torchscript_chains_");
    if (!folder.ok()) std::abort();
    files.folder.emplace(*std::move(folder));
  }
  auto it = files.paths.find(key);
  if (it == files.paths.end()) {
    const std::string file = files.folder->Path(absl::StrCat("chain_", key, ".pt"));
    const absl::Status written = WriteChain(chain, seed, file);
    if (!written.ok()) {
      std::fprintf(stderr, "writing a TorchScript chain: %s\n", written.ToString().c_str());
      std::abort();
    }
    it = files.paths.emplace(key, file).first;
  }
  return it->second;
}

}  // namespace

std::string SmallTorchScriptSpec(const SpecChooser& choose) {
  const SmallChain small = DrawSmallChain(choose);
  const ChainDescription& chain = small.chain;
  const int64_t batch = small.batch;
  const std::string path = WrittenChain(chain, small.seed);
  if (chain.tokens) {
    return absl::StrCat("torchscript:file=", path, ":tokens=", chain.input, ":vocab=", chain.vocab,
                        ":batch=", batch);
  }
  return absl::StrCat("torchscript:file=", path, ":input=", chain.input,
                      small.classes ? absl::StrCat(":classes=", small.width) : "",
                      ":batch=", batch);
}

std::string SmallChainFileSpec(const SpecChooser& choose, int ranks) {
  SmallChain small = DrawSmallChain(choose);
  small.chain.stages.push_back({StageKind::kLoss, 0});
  small.chain.file_batch = small.batch * ranks;
  small.chain.ranks = ranks;
  return absl::StrCat("chain:file=", WrittenChain(small.chain, small.seed));
}

}  // namespace ckpt::testing
