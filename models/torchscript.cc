#include "models/torchscript.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/core/ivalue.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/randint.h"
#include "ATen/ops/randn.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "c10/core/DefaultDtype.h"
#include "c10/core/GradMode.h"
#include "core/base/digest.h"
#include "core/base/files.h"
#include "core/base/printable.h"
#include "core/base/status_macros.h"
#include "core/base/zip.h"
#include "core/run/chain_model.h"
#include "core/run/checkpoint.h"
#include "core/run/torch_status.h"
#include "torch/csrc/jit/api/function_impl.h"
#include "torch/csrc/jit/api/module.h"
#include "torch/csrc/jit/ir/ir.h"
#include "torch/csrc/jit/passes/inliner.h"
#include "torch/csrc/jit/runtime/graph_executor.h"
#include "torch/csrc/jit/serialization/import.h"
#include "torch/version.h"

namespace ckpt {
namespace {

// A model file larger than this is refused before it is read.
constexpr int64_t kMaxFileBytes = int64_t{4} << 30;
constexpr int kMaxShapeDims = 8;
// How deep ReadBlock follows calls (TorchScript has no recursion; this bounds a crafted file).
constexpr int kMaxCallDepth = 32;
constexpr int64_t kMaxShapeElements = int64_t{1} << 40;
constexpr char kAccepted[] =
    "accepted: a file torch.jit.save wrote of a scripted or traced nn.Sequential";
constexpr char kBatchPrefix[] = "ckptlab_batch_";
constexpr char kRanksBuffer[] = "ckptlab_ranks";
constexpr int64_t kMaxRanks = 1 << 16;
// The archive's record of the torch release that wrote it (Chain.save's extra file), and the
// most it may hold.
constexpr char kWriterRecord[] = "extra/ckptlab_torch";
constexpr uint64_t kMaxWriterBytes = 64;

// The bytes of each file as this process first read it, by path as given: every spec naming
// the file, whatever its batch, reads the same model.
std::mutex cache_mutex;
std::map<std::string, std::string>& FileCache() {
  static auto* files = new std::map<std::string, std::string>;
  return *files;
}
// The facts of each spec checked, by canonical spec.
std::map<std::string, TorchScriptFacts>& FactsCache() {
  static auto* facts = new std::map<std::string, TorchScriptFacts>;
  return *facts;
}

bool HasTokens(const ParamValues& params) { return params.Text("tokens") != "none"; }

// A chain file (models/chain.cc): its batch is in the file, its last stage returns the loss.
bool IsChainFile(const ParamValues& params) { return params.name() == "chain"; }

std::string Where(const ParamValues& params) {
  return absl::StrCat(params.name(), ":file=", params.Text("file"));
}

// "8x3 float, 8 long": the shapes and types of `tensors`, for messages and repeat keys.
std::string ShapesOf(const std::vector<at::Tensor>& tensors) {
  std::vector<std::string> each;
  for (const at::Tensor& t : tensors) {
    each.push_back(absl::StrCat(absl::StrJoin(t.sizes(), "x"), " ", std::string(t.dtype().name())));
  }
  return absl::StrJoin(each, ", ");
}

// The top module's own buffers besides a chain file's batch and ranks: the model's buffers that no
// stage reads, which Chain.save keeps there (as it keeps such parameters), so that the memory the
// model holds is counted whole. Stage 0 declares their bytes.
std::vector<at::Tensor> BuffersBesideStages(const torch::jit::Module& module) {
  std::vector<at::Tensor> out;
  for (const auto& b : module.named_buffers(/*recurse=*/false)) {
    if (!absl::StartsWith(b.name, kBatchPrefix) && b.name != kRanksBuffer) out.push_back(b.value);
  }
  return out;
}

// The batch a chain file holds: the top module's own buffers ckptlab_batch_0, ckptlab_batch_1,
// ... in that order, and the ranks it is for: its buffer ckptlab_ranks (a 0-dimensional int64
// tensor; none: 1), which must divide every batch tensor's first dimension. InvalidArgument
// where there is no batch, a batch tensor has no rows, or the ranks are not that.
struct FileBatch {
  std::vector<at::Tensor> tensors;
  int ranks = 1;
};
absl::StatusOr<FileBatch> ReadFileBatch(const ParamValues& params,
                                        const torch::jit::Module& module) {
  std::map<std::string, at::Tensor> buffers;
  RETURN_IF_ERROR(RunTorch([&] {
    for (const auto& b : module.named_buffers(/*recurse=*/false)) buffers[b.name] = b.value;
  }));
  FileBatch batch;
  for (auto it = buffers.find(absl::StrCat(kBatchPrefix, 0)); it != buffers.end();
       it = buffers.find(absl::StrCat(kBatchPrefix, batch.tensors.size()))) {
    batch.tensors.push_back(it->second);
  }
  if (batch.tensors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(params), ": the file holds no batch (buffers ", kBatchPrefix, "0, ", kBatchPrefix,
        "1, ... of the top module); accepted: a file Chain.save wrote (python/ckptlab), or "
        "torchscript:file= with input or tokens for any other"));
  }
  for (size_t k = 0; k < batch.tensors.size(); ++k) {
    const at::Tensor& t = batch.tensors[k];
    if (t.dim() == 0 || t.size(0) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(params), ": its batch tensor ", kBatchPrefix, k, " (", ShapesOf({t}),
          ") has no rows; accepted: batch tensors of one row or more (their first dimension)"));
    }
  }
  const auto ranks = buffers.find(kRanksBuffer);
  if (ranks == buffers.end()) return batch;
  const at::Tensor& r = ranks->second;
  const bool whole = r.dim() == 0 && r.scalar_type() == at::kLong;
  const int64_t value = whole ? r.item<int64_t>() : 0;
  const bool divides = std::all_of(batch.tensors.begin(), batch.tensors.end(), [&](const auto& t) {
    return value >= 1 && t.dim() > 0 && t.size(0) % value == 0 && t.size(0) >= value;
  });
  if (!whole || value > kMaxRanks || !divides) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(params), ": its ", kRanksBuffer, " (",
                     whole ? absl::StrCat(value) : ShapesOf({r}), ") does not share its batch (",
                     ShapesOf(batch.tensors), "); accepted: a 0-dimensional int64 tensor in 1..",
                     kMaxRanks, " dividing every batch tensor's first dimension"));
  }
  batch.ranks = static_cast<int>(value);
  return batch;
}

// Rank 0's rows of a chain file's batch: the first 1/ranks of every tensor's, which its stages
// were traced on.
std::vector<at::Tensor> FirstShare(const FileBatch& batch) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : batch.tensors) out.push_back(t.narrow(0, 0, t.size(0) / batch.ranks));
  return out;
}

// Copies of a chain file's batch, the floating-point ones requiring grad (as every batch's).
std::vector<at::Tensor> CopiesOf(const std::vector<at::Tensor>& batch) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : batch) {
    out.push_back(t.detach().clone().requires_grad_(t.is_floating_point()));
  }
  return out;
}

absl::StatusOr<std::string> ReadModelFile(const ParamValues& params) {
  const std::string& path = params.Text("file");
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = FileCache().find(path);
    if (it != FileCache().end()) return it->second;
  }
  absl::StatusOr<std::string> bytes = ReadRegularFile(path, kMaxFileBytes);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(params), ": ", bytes.status().message(), "; ", kAccepted));
  }
  if (bytes->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(params), ": the file is empty; ", kAccepted));
  }
  std::lock_guard<std::mutex> lock(cache_mutex);
  return FileCache().emplace(path, *std::move(bytes)).first->second;
}

// OK where the torch release the archive's writer record names is no newer in major.minor than
// this LibTorch; InvalidArgument naming both otherwise (see the header), or where the record is
// not what Chain.save writes (stored, a release of at most kMaxWriterBytes).
absl::Status CheckWriter(const ParamValues& params, const ZipMember& member) {
  if (member.method != 0 || member.size > kMaxWriterBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(params), ": its record ", kWriterRecord, " is ",
                     member.method != 0 ? "compressed" : absl::StrCat(member.size, " bytes long"),
                     "; accepted: a torch release of at most ", kMaxWriterBytes,
                     " bytes, stored, as ", "Chain.save writes it"));
  }
  const absl::string_view record = member.stored;
  absl::StatusOr<TorchRelease> writer = ParseTorchRelease(record);
  if (!writer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(Where(params), ": its record ", kWriterRecord,
                                                   ": ", writer.status().message()));
  }
  if (std::pair(writer->major, writer->minor) <=
      std::pair(TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      Where(params), ": written by torch ", Printable(record), ", newer than the LibTorch ",
      TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR,
      " this program is built against, which may misread it; accepted: a file written by torch ",
      TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR,
      " or older, or this program built against the writer's LibTorch (docs/build.md)"));
}

// The module in `bytes` on `device`, its tensors in the dtypes the file holds them in (a float64
// model's, bfloat16 weights beside float32 norms), as PyTorch trains it; under a float64 default
// dtype (a float64 twin, experiments/gradient_check.h), every floating-point one in float64.
absl::StatusOr<torch::jit::Module> LoadModule(const ParamValues& params, const std::string& bytes,
                                              c10::Device device) {
  // Pinned before any graph of the module runs (see the header).
  torch::jit::setGraphExecutorOptimize(false);
  const auto unread = [&](const absl::Status& status) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(params), ": not a TorchScript archive this LibTorch (", TORCH_VERSION_MAJOR, ".",
        TORCH_VERSION_MINOR, ") reads: ", status.message(), "; ", kAccepted));
  };
  // The writer's record first, found in the zip archive's directory, before LibTorch reads it.
  absl::StatusOr<std::optional<ZipMember>> writer = FindZipMember(bytes, kWriterRecord);
  if (!writer.ok()) return unread(writer.status());
  if (writer->has_value()) RETURN_IF_ERROR(CheckWriter(params, **writer));
  absl::StatusOr<torch::jit::Module> module = RunTorch([&] {
    std::istringstream in(bytes);
    return torch::jit::load(in, c10::Device(c10::DeviceType::CPU));
  });
  if (!module.ok()) return unread(module.status());
  const bool twin = c10::get_default_dtype() == caffe2::TypeMeta::Make<double>();
  RETURN_IF_ERROR(RunTorch([&] {
    c10::NoGradGuard no_grad;
    const auto move = [&](at::Tensor t) {
      const bool widen = twin && t.is_floating_point();
      t.set_data(t.to(device, widen ? at::kDouble : t.scalar_type()));
    };
    for (const at::Tensor& t : module->parameters()) move(t);
    for (const at::Tensor& t : module->buffers()) move(t);
  }));
  return module;
}

// Whether `value` is module state: an attribute of a module (prim::GetAttr), seen through the
// casts TorchScript puts around optional ones.
bool IsModuleState(const torch::jit::Value* value) {
  const torch::jit::Node* node = value->node();
  while (node->kind() == c10::prim::unchecked_cast) node = node->input(0)->node();
  return node->kind() == c10::prim::GetAttr;
}

struct GraphFacts {
  bool stochastic = false;
  bool updates_state = false;
  std::string sets_attribute;  // an attribute the forward assigns (prim::SetAttr), if any
};

// Ops that draw random numbers without taking a Generator argument.
bool IsDropout(c10::Symbol kind) {
  static const char* const kDropouts[] = {"aten::dropout",
                                          "aten::dropout_",
                                          "aten::feature_dropout",
                                          "aten::feature_dropout_",
                                          "aten::alpha_dropout",
                                          "aten::alpha_dropout_",
                                          "aten::feature_alpha_dropout",
                                          "aten::feature_alpha_dropout_",
                                          "aten::native_dropout"};
  for (const char* name : kDropouts) {
    if (kind == c10::Symbol::fromQualString(name)) return true;
  }
  return false;
}

// Ops that draw random numbers: any of whose overloads takes a Generator (randperm's and
// normal's without one draw from the default generator all the same), and those that take none
// at all (randn_like).
bool DrawsRandomNumbers(c10::Symbol kind) {
  static const char* const kWithout[] = {"aten::rand_like", "aten::randn_like",
                                         "aten::randint_like", "aten::rrelu", "aten::rrelu_"};
  for (const char* name : kWithout) {
    if (kind == c10::Symbol::fromQualString(name)) return true;
  }
  for (const std::shared_ptr<torch::jit::Operator>& op : torch::jit::getAllOperatorsFor(kind)) {
    for (const c10::Argument& arg : op->schema().arguments()) {
      const c10::TypePtr& type = arg.type();
      if (type->kind() == c10::TypeKind::GeneratorType ||
          (type->kind() == c10::TypeKind::OptionalType &&
           type->containedType(0)->kind() == c10::TypeKind::GeneratorType)) {
        return true;
      }
    }
  }
  return false;
}

bool IsNormWithRunningStats(c10::Symbol kind) {
  return kind == c10::Symbol::fromQualString("aten::batch_norm") ||
         kind == c10::Symbol::fromQualString("aten::instance_norm") ||
         kind == c10::Symbol::fromQualString("aten::_batch_norm_impl_index") ||
         kind == c10::Symbol::fromQualString("aten::native_batch_norm");
}

// The graph a call node runs (a free function's, or a method's of a module), or null.
std::shared_ptr<torch::jit::Graph> CalleeGraph(const torch::jit::Node* node) {
  torch::jit::Function* callee = nullptr;
  if (node->kind() == c10::prim::CallFunction) {
    if (auto type = node->input(0)->type()->cast<c10::FunctionType>()) callee = type->function();
  } else if (node->kind() == c10::prim::CallMethod) {
    if (auto type = node->input(0)->type()->cast<c10::ClassType>()) {
      callee = type->findMethod(node->s(c10::attr::name));
    }
  }
  torch::jit::GraphFunction* graph =
      callee != nullptr ? torch::jit::tryToGraphFunction(*callee) : nullptr;
  return graph != nullptr ? graph->graph() : nullptr;
}

// What ReadBlock has read of one stage: its facts, and each graph it called, once.
struct GraphReading {
  GraphFacts facts;
  std::set<const torch::jit::Graph*> called;
  std::string calls;  // the code of every graph called, in the order first called
};

// Reads `block`, its nested blocks and the graphs of the calls in them (which Inline leaves
// where it does not inline: calls of free functions such as F.dropout in a loaded module), each
// graph once and at most kMaxCallDepth calls deep, so a crafted file's reading is bounded by its
// code's size.
void ReadBlock(const torch::jit::Block* block, int depth, GraphReading& reading) {
  GraphFacts& facts = reading.facts;
  for (const torch::jit::Node* node : block->nodes()) {
    for (const torch::jit::Block* inner : node->blocks()) ReadBlock(inner, depth, reading);
    if (depth < kMaxCallDepth) {
      std::shared_ptr<torch::jit::Graph> callee = CalleeGraph(node);
      if (callee != nullptr && reading.called.insert(callee.get()).second) {
        reading.calls.append(callee->toString(/*print_source_locations=*/false));
        ReadBlock(callee->block(), depth + 1, reading);
      }
    }
    const c10::Symbol kind = node->kind();
    if (kind == c10::prim::SetAttr) {
      facts.sets_attribute = node->s(c10::attr::name);
      continue;
    }
    if (IsDropout(kind) || DrawsRandomNumbers(kind)) facts.stochastic = true;
    if (IsNormWithRunningStats(kind) && node->inputs().size() > 4 &&
        IsModuleState(node->input(3))) {
      facts.updates_state = true;  // running_mean (and running_var) updated in training
    }
    const c10::FunctionSchema* schema = node->maybeSchema();
    if (schema == nullptr) continue;
    for (size_t i = 0; i < schema->arguments().size() && i < node->inputs().size(); ++i) {
      const c10::Argument& arg = schema->arguments()[i];
      if (arg.alias_info() != nullptr && arg.alias_info()->isWrite() &&
          IsModuleState(node->input(i))) {
        facts.updates_state = true;
      }
    }
  }
}

// `code` without the names of module types ("__torch__.Block",
// "__torch__.___torch_mangle_3.Block"): tracing gives every module a type of its own, and scripting
// may, so alike stages differ only there.
std::string WithoutTypeNames(const std::string& code) {
  static constexpr absl::string_view kPrefix = "__torch__.";
  std::string out;
  size_t i = 0;
  while (i < code.size()) {
    const size_t at = code.find(kPrefix.data(), i, kPrefix.size());
    if (at == std::string::npos) break;
    out.append(code, i, at - i);
    out.append("__torch__");
    i = at + kPrefix.size();
    while (i < code.size() && (std::isalnum(static_cast<unsigned char>(code[i])) ||
                               code[i] == '_' || code[i] == '.')) {
      ++i;
    }
  }
  out.append(code, i, std::string::npos);
  return out;
}

// What a stage's forward does, read from its graph with every call inlined.
GraphFacts ReadGraph(const torch::jit::Module& stage, std::string* code) {
  std::shared_ptr<torch::jit::Graph> graph = stage.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  GraphReading reading;
  ReadBlock(graph->block(), /*depth=*/0, reading);
  *code = WithoutTypeNames(graph->toString(/*print_source_locations=*/false) + reading.calls);
  return reading.facts;
}

// A stage's outputs as tensors: a tensor, or a tuple or list of tensors. What else a stage returns
// is an error naming it.
std::vector<at::Tensor> TensorsOf(const c10::IValue& value, const std::string& stage) {
  if (value.isTensor()) return {value.toTensor()};
  std::vector<c10::IValue> elements;
  if (value.isTuple()) {
    for (const c10::IValue& e : value.toTupleRef().elements()) elements.push_back(e);
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorVector()) elements.emplace_back(t);
  }
  TORCH_CHECK(!elements.empty(), "stage ", stage, " returns ", value.tagKind(),
              "; accepted: a tensor, or a tuple or list of tensors");
  std::vector<at::Tensor> out;
  for (const c10::IValue& e : elements) {
    TORCH_CHECK(e.isTensor(), "stage ", stage, " returns a ", value.tagKind(), " holding a ",
                e.tagKind(), "; accepted: a tensor, or a tuple or list of tensors");
    out.push_back(e.toTensor());
  }
  return out;
}

// As ckptlab.apply hands a stage its input (python/ckptlab/planned.py): one value whole, unless
// the forward needs several arguments (without a default), which get the tensors spread.
TorchScriptPacking PackingOf(const torch::jit::Module& stage) {
  const std::vector<c10::Argument>& args =
      stage.get_method("forward").function().getSchema().arguments();  // self first
  int required = 0;
  for (size_t i = 1; i < args.size(); ++i) {
    if (!args[i].default_value().has_value() && !args[i].kwarg_only()) ++required;
  }
  if (required > 1 || args.size() < 2) return TorchScriptPacking::kSpread;
  switch (args[1].type()->kind()) {
    case c10::TypeKind::TupleType:
      return TorchScriptPacking::kTuple;
    case c10::TypeKind::ListType:
      return TorchScriptPacking::kList;
    default:
      return TorchScriptPacking::kSpread;
  }
}

// The arguments of a stage's forward that takes `x` as `packing` says.
std::vector<c10::IValue> ArgumentsOf(TorchScriptPacking packing, const std::vector<at::Tensor>& x) {
  switch (packing) {
    case TorchScriptPacking::kTuple:
      return {c10::ivalue::Tuple::create(std::vector<c10::IValue>(x.begin(), x.end()))};
    case TorchScriptPacking::kList:
      return {c10::List<at::Tensor>(x)};
    case TorchScriptPacking::kSpread:
      break;
  }
  return std::vector<c10::IValue>(x.begin(), x.end());
}

// The attributes of a stage and its submodules that are neither tensors nor modules (a
// dropout's p, a flag), and its buffers' shapes: stages whose code and parameters are alike may
// still run differently where these differ (a stochastic depth of 0 draws nothing).
std::string AttributesOf(const torch::jit::Module& stage) {
  std::ostringstream out;
  std::vector<at::Tensor> buffers;
  for (const auto& module : stage.named_modules()) {
    const c10::ClassTypePtr& type = module.value.type();
    for (size_t k = 0; k < type->numAttributes(); ++k) {
      const c10::IValue value = module.value._ivalue()->getSlot(k);
      if (value.isTensor()) buffers.push_back(value.toTensor());
      if (value.isTensor() || value.isModule()) continue;
      out << module.name << "." << type->getAttributeName(k) << "=";
      // An object prints its address, which says nothing of what runs: its type instead.
      if (value.isObject() || value.isCapsule()) {
        out << value.type()->str() << ";";
      } else {
        out << value << ";";
      }
    }
  }
  out << ShapesOf(buffers);
  return out.str();
}

// Every tensor's version counter (views share their base's): what an in-place write changes.
std::vector<int64_t> VersionsOf(const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> versions;
  for (const at::Tensor& t : tensors) versions.push_back(t.defined() ? t._version() : 0);
  return versions;
}

std::string StageName(const std::string& child, const torch::jit::Module& module) {
  const c10::optional<c10::QualifiedName>& type = module.type()->name();
  return type ? absl::StrCat(child, ".", type->name()) : child;
}

// "8x3x224x224 float": the batch's inputs, a floating-point one in `dtype`.
std::string BatchShape(const ParamValues& params, c10::ScalarType dtype) {
  if (HasTokens(params))
    return absl::StrCat(params.Int("batch"), "x", params.Text("tokens"), " long");
  return absl::StrCat(params.Int("batch"), "x", params.Text("input"), " ",
                      std::string(c10::scalarTypeToTypeMeta(dtype).name()));
}

// The dtype of a batch drawn for `module` (input=): its first floating-point parameter's, as the
// model computes in it; the default dtype where it has none.
c10::ScalarType InputDtype(const torch::jit::Module& module) {
  for (const at::Tensor& p : module.parameters()) {
    if (p.is_floating_point()) return p.scalar_type();
  }
  return c10::typeMetaToScalarType(c10::get_default_dtype());
}

Batch DrawBatch(const ParamValues& params, uint64_t seed, c10::Device device,
                c10::ScalarType dtype) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t batch = params.Int("batch");
  Batch out;
  if (HasTokens(params)) {
    const int64_t tokens = ParseShape(params.Text("tokens")).value().at(0);
    const at::Tensor ids = at::randint(params.Int("vocab"), {batch, tokens + 1}, gen,
                                       at::TensorOptions().dtype(at::kLong));
    out.inputs.push_back(ids.narrow(1, 0, tokens).contiguous().to(device));
    out.targets.push_back(ids.narrow(1, 1, tokens).contiguous().to(device));
    return out;
  }
  std::vector<int64_t> shape = ParseShape(params.Text("input")).value();
  shape.insert(shape.begin(), batch);
  out.inputs.push_back(at::randn(shape, gen).to(device, dtype).requires_grad_(true));
  if (!params.IsAuto("classes")) {
    out.targets.push_back(
        at::randint(params.Int("classes"), {batch}, gen, at::TensorOptions().dtype(at::kLong))
            .to(device));
  }
  return out;
}

// Whether the loss is cross-entropy for this output (see the header).
TorchScriptLoss LossFor(const ParamValues& params, const at::Tensor& output) {
  const int64_t batch = params.Int("batch");
  if (HasTokens(params)) {
    const int64_t tokens = ParseShape(params.Text("tokens")).value().at(0);
    if (output.dim() == 3 && output.size(0) == batch && output.size(1) == tokens &&
        output.size(2) == params.Int("vocab") && output.is_floating_point()) {
      return TorchScriptLoss::kCrossEntropy;
    }
  } else if (!params.IsAuto("classes") && output.dim() == 2 && output.size(0) == batch &&
             output.size(1) == params.Int("classes") && output.is_floating_point()) {
    return TorchScriptLoss::kCrossEntropy;
  }
  return TorchScriptLoss::kMeanSquare;
}

// The batch shape a torchscript spec gives (input or tokens, and batch): InvalidArgument naming
// what is wrong.
absl::Status CheckBatchShape(const ParamValues& params) {
  const bool input = params.Text("input") != "none";
  const bool tokens = HasTokens(params);
  if (input == tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(params), ": give one of input (3x224x224) and tokens (1024, with vocab), not ",
        input ? "both" : "neither"));
  }
  const std::string shape_key = input ? "input" : "tokens";
  const absl::StatusOr<std::vector<int64_t>> shape = ParseShape(params.Text(shape_key));
  if (!shape.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(params), ": ", shape_key, ": ", shape.status().message()));
  }
  int64_t elements = params.Int("batch");
  for (const int64_t d : *shape) {
    elements = d > kMaxShapeElements / elements ? kMaxShapeElements + 1 : elements * d;
  }
  if (elements > kMaxShapeElements) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(params), ": the batch (", params.Int("batch"), "x", params.Text(shape_key),
        ") has more than 2^40 elements; accepted: at most 2^40 in all (batch x ", shape_key, ")"));
  }
  if (tokens) {
    if (shape->size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(params), ": tokens=", params.Text("tokens"),
                       ": accepted: one number, the ids per example"));
    }
    if (params.IsAuto("vocab")) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(params), ": tokens needs vocab, the number of ids"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TorchScriptFacts> ReadFacts(const ParamValues& params) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadModelFile(params));
  ASSIGN_OR_RETURN(torch::jit::Module module,
                   LoadModule(params, bytes, c10::Device(c10::DeviceType::CPU)));
  std::vector<std::pair<std::string, torch::jit::Module>> children;
  RETURN_IF_ERROR(RunTorch([&] {
    for (const auto& child : module.named_children())
      children.emplace_back(child.name, child.value);
  }));
  if (children.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(params), ": the module is not a sequence of stages: it has no child modules; ",
        kAccepted));
  }
  TorchScriptFacts facts;
  facts.file_digest = absl::StrFormat("%016x", Fnv1a64(bytes));
  std::vector<std::string> codes;
  // Storages counted already: the parameters', then each buffer's for the first stage holding it.
  std::set<const c10::StorageImpl*> counted;
  RETURN_IF_ERROR(RunTorch([&] {
    for (const at::Tensor& p : module.parameters())
      counted.insert(p.storage().unsafeGetStorageImpl());
  }));
  for (const auto& [name, child] : children) {
    if (!child.find_method("forward")) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(params), ": the module is not a sequence of stages: its child '", name,
                       "' has no forward method; ", kAccepted));
    }
    std::string code;
    ASSIGN_OR_RETURN(GraphFacts graph, RunTorch([&] { return ReadGraph(child, &code); }));
    if (!graph.sets_attribute.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(params), ": stage ", name, " assigns its attribute '", graph.sets_attribute,
          "' in forward, which a rerun would assign again; accepted: stages whose state is "
          "tensors updated in place (BatchNorm's)"));
    }
    StageInfo stage;
    stage.name = StageName(name, child);
    stage.stochastic = graph.stochastic;
    stage.updates_state = graph.updates_state;
    RETURN_IF_ERROR(RunTorch([&] {
      for (const at::Tensor& b : child.buffers()) {
        if (b.has_storage() && counted.insert(b.storage().unsafeGetStorageImpl()).second) {
          stage.buffer_bytes += static_cast<int64_t>(b.storage().nbytes());
        }
      }
    }));
    facts.stages.push_back(stage);
    codes.push_back(std::move(code));
  }
  RETURN_IF_ERROR(RunTorch([&] {
    for (const at::Tensor& b : BuffersBesideStages(module)) {
      if (b.has_storage() && counted.insert(b.storage().unsafeGetStorageImpl()).second) {
        facts.stages.front().buffer_bytes += static_cast<int64_t>(b.storage().nbytes());
      }
    }
  }));
  // The batch through every stage once, without a graph and in training mode (this module is
  // a copy of its own, so its state may change): each stage must take what the one before
  // returns; the shapes each stage takes key its repeats; what a stage does to its inputs, to
  // its buffers and to the default generator is seen as it happens, also where its code is
  // reached another way than the graph reading above follows.
  module.train();
  c10::NoGradGuard no_grad;
  absl::StatusOr<Batch> batch;
  if (IsChainFile(params)) {
    ASSIGN_OR_RETURN(const FileBatch file, ReadFileBatch(params, module));
    facts.ranks = file.ranks;
    batch = Batch{FirstShare(file), {}};
  } else {
    batch = RunTorch([&] {
      return DrawBatch(params, /*seed=*/0, c10::Device(c10::DeviceType::CPU), InputDtype(module));
    });
  }
  if (!batch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(Where(params), ": the batch (",
                                                   BatchShape(params, InputDtype(module)),
                                                   ") cannot be made: ", batch.status().message()));
  }
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::vector<at::Tensor> x = batch->inputs;
  for (size_t i = 0; i < children.size(); ++i) {
    torch::jit::Module& child = children[i].second;
    const std::string shapes = ShapesOf(x);
    std::vector<at::Tensor> buffers;
    for (const at::Tensor& b : child.buffers()) buffers.push_back(b);
    const std::vector<int64_t> input_versions = VersionsOf(x);
    const std::vector<int64_t> buffer_versions = VersionsOf(buffers);
    facts.packing.push_back(TorchScriptPacking::kSpread);
    absl::StatusOr<std::vector<at::Tensor>> y = RunTorch([&] {
      facts.packing.back() = PackingOf(child);
      const at::Tensor rng = generator.get_state();
      std::vector<at::Tensor> out =
          TensorsOf(child.forward(ArgumentsOf(facts.packing.back(), x)), facts.stages[i].name);
      if (!generator.get_state().equal(rng)) facts.stages[i].stochastic = true;
      return out;
    });
    if (!y.ok()) {
      const std::string what = i == 0 ? absl::StrCat("the batch (", shapes, ")")
                                      : absl::StrCat("the output of stage ",
                                                     facts.stages[i - 1].name, " (", shapes, ")");
      return absl::InvalidArgumentError(absl::StrCat(Where(params), ": ", what,
                                                     " does not fit stage ", facts.stages[i].name,
                                                     " in training: ", y.status().message()));
    }
    facts.written_inputs.emplace_back();
    const std::vector<int64_t> versions = VersionsOf(x);
    for (size_t k = 0; k < x.size(); ++k) {
      if (versions[k] != input_versions[k])
        facts.written_inputs.back().push_back(static_cast<int>(k));
    }
    if (VersionsOf(buffers) != buffer_versions) facts.stages[i].updates_state = true;
    std::vector<at::Tensor> own;
    for (const at::Tensor& p : child.parameters()) own.push_back(p);
    // Not the type's name, which differs between alike stages where it is mangled or traced.
    ASSIGN_OR_RETURN(const std::string attributes, RunTorch([&] { return AttributesOf(child); }));
    facts.stages[i].repeat_key = absl::StrFormat(
        "torchscript#%016x",
        Fnv1a64(absl::StrCat(codes[i], "|", ShapesOf(own), "|", shapes, "|", attributes)));
    x = *std::move(y);
  }
  if (IsChainFile(params)) {  // the last stage returns the loss
    if (x.size() != 1 || x[0].dim() != 0 || !x[0].is_floating_point()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(params), ": the last stage, ", facts.stages.back().name, ", returns ",
                       ShapesOf(x), ", not the loss; accepted: a floating-point scalar"));
    }
    facts.loss = TorchScriptLoss::kOutput;
    facts.output_shape = {};
    return facts;
  }
  // The loss differentiates the last stage's first output.
  if (!x.at(0).is_floating_point()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(params), ": the last stage, ", facts.stages.back().name, ", returns ",
        ShapesOf({x.at(0)}),
        " first, which no loss can be differentiated from; accepted: a floating-point tensor"));
  }
  facts.loss = LossFor(params, x.at(0));
  facts.output_shape = x.at(0).sizes().vec();
  return facts;
}
class TorchScriptModel : public ChainModel {
 public:
  static std::vector<ParamDef> Params();
  // Reads and loads the file, reads each stage's facts and runs the batch through the stages
  // once without a graph: InvalidArgument naming the file and what is wrong (not a TorchScript
  // archive, saved by a newer PyTorch, not a sequence of stages, a batch or an output that does
  // not fit the next stage).
  static absl::Status Check(const ParamValues& params);
  static absl::StatusOr<std::shared_ptr<ChainModel>> Create(const ParamValues& params,
                                                            const ModelContext& context);
  static std::vector<std::string> PaperSpecs() { return {}; }
  // No small_spec: the tests generate their files (testing/torchscript_test.cc).
  static std::vector<StageInfo> StagesFor(const ParamValues& params);
  static std::string ContentDigest(const ParamValues& params) {
    return TorchScriptContentDigest(params);
  }

  TorchScriptModel(ParamValues params, torch::jit::Module module, TorchScriptFacts facts,
                   c10::Device device);

  std::string spec() const override { return params_.Canonical(); }
  std::vector<StageInfo> Stages() const override { return facts_.stages; }
  std::vector<at::Tensor> RunStage(int index, const std::vector<at::Tensor>& inputs,
                                   const StageParts& parts, const Batch& batch) override;
  at::Tensor Loss(const std::vector<at::Tensor>& outputs, const Batch& batch) override;
  Batch MakeBatch(uint64_t seed) override;
  std::vector<at::Tensor> Parameters() override;
  std::vector<at::Tensor> State() override;
  void SetTraining(bool training) override { module_.train(training); }

 private:
  const ParamValues params_;
  torch::jit::Module module_;
  std::vector<torch::jit::Module> stages_;
  std::vector<at::Tensor> file_batch_;  // a chain file's batch, on the device
  const TorchScriptFacts facts_;
  const c10::Device device_;
  // A buffer of a stage that updates state, and two copies made once for it: `before`, its
  // values when the step's first run of the stage began, and a stand-in that a rerun runs with
  // in the buffer's place, filled from `before`, so that the rerun reads the state the first
  // run read, updates the stand-in, and the graph it records saves the stand-in; the buffer is
  // put back after, as the step's first run left it. Nothing is allocated during a step, and
  // nothing a graph saved is written to afterwards (which autograd would refuse).
  struct StateSlot {
    torch::jit::Module owner;  // the (sub)module holding the buffer
    std::string name;
    at::Tensor buffer;
    at::Tensor before;
    at::Tensor stand_in;
  };
  std::vector<std::vector<StateSlot>> state_;  // per stage
};

const ModelRegistration<TorchScriptModel> registration(
    "torchscript",
    "your nn.Sequential from torch.jit.save, a stage per child; loss: cross-entropy where the "
    "output is [batch, classes] or [batch, tokens, vocab], else the mean of its squares",
    /*quick_spec=*/"");

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParseShape(absl::string_view text) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape '", text, "' ", why, "; accepted: 1 to ", kMaxShapeDims,
                     " positive integers joined by 'x' (3x224x224), at most 2^40 elements"));
  };
  std::vector<int64_t> dims;
  int64_t elements = 1;
  for (absl::string_view part : absl::StrSplit(text, 'x')) {
    if (dims.size() == kMaxShapeDims) return bad("has too many dimensions");
    int64_t d = 0;
    if (part.empty() || part.size() > 13 || part.find_first_not_of("0123456789") != part.npos ||
        !absl::SimpleAtoi(part, &d) || d < 1) {
      return bad(absl::StrCat("has a dimension '", part, "' that is not a positive integer"));
    }
    if (d > kMaxShapeElements / elements) return bad("has too many elements");
    elements *= d;
    dims.push_back(d);
  }
  return dims;
}

absl::StatusOr<TorchRelease> ParseTorchRelease(absl::string_view text) {
  const auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", Printable(text.substr(0, 64)), text.size() > 64 ? "...' " : "' ",
        "is not a torch release; accepted: MAJOR.MINOR, each of 1 to 4 digits, then anything "
        "(2.15.0+cu132)"));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(text, absl::MaxSplits('.', 2));
  if (parts.size() < 2) return bad();
  // The minor number ends where its digits do ("2.6a0").
  parts[1] = parts[1].substr(0, parts[1].find_first_not_of("0123456789"));
  TorchRelease release;
  for (auto [part, number] : {std::pair(parts[0], &release.major), {parts[1], &release.minor}}) {
    if (part.empty() || part.size() > 4 || part.find_first_not_of("0123456789") != part.npos ||
        !absl::SimpleAtoi(part, number)) {
      return bad();
    }
  }
  return release;
}

std::vector<ParamDef> TorchScriptModel::Params() {
  return {
      TextParam("file", "",
                "the file torch.jit.save wrote (runs its code: load only files you "
                "trust)"),
      TextParam("input", "none", "one example's floating-point input, e.g. 3x224x224"),
      TextParam("tokens", "none", "one example's token ids, e.g. 1024 (with vocab)"),
      IntParam("vocab", "auto", "token ids are drawn in [0, vocab); needed with tokens")
          .Min(1)
          .Max(int64_t{1} << 31)
          .AllowAuto(),
      IntParam("classes", "auto",
               "labels drawn in [0, classes): cross-entropy where the output is [batch, classes]")
          .Min(2)
          .Max(int64_t{1} << 31)
          .AllowAuto(),
      IntParam("batch", "8", "examples per batch").Min(1).Max(1 << 24).Scales(1),
  };
}

absl::Status TorchScriptModel::Check(const ParamValues& params) {
  return TorchScriptFactsFor(params).status();
}

absl::StatusOr<TorchScriptFacts> TorchScriptFactsFor(const ParamValues& params) {
  const std::string spec = params.Canonical();
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = FactsCache().find(spec);
    if (it != FactsCache().end()) return it->second;
  }
  if (!IsChainFile(params)) RETURN_IF_ERROR(CheckBatchShape(params));
  ASSIGN_OR_RETURN(TorchScriptFacts facts, ReadFacts(params));
  std::lock_guard<std::mutex> lock(cache_mutex);
  return FactsCache().emplace(spec, std::move(facts)).first->second;
}

std::string TorchScriptContentDigest(const ParamValues& params) {
  absl::StatusOr<TorchScriptFacts> facts = TorchScriptFactsFor(params);
  return facts.ok() ? facts->file_digest : "";
}

std::vector<StageInfo> TorchScriptModel::StagesFor(const ParamValues& params) {
  // Bind ran Check, so the facts are kept; a file gone bad since reads as no stages, which no
  // plan fits.
  absl::StatusOr<TorchScriptFacts> facts = TorchScriptFactsFor(params);
  return facts.ok() ? facts->stages : std::vector<StageInfo>{};
}

absl::StatusOr<std::shared_ptr<ChainModel>> TorchScriptModel::Create(const ParamValues& params,
                                                                     const ModelContext& context) {
  return CreateTorchScriptModel(params, context);
}

absl::StatusOr<std::shared_ptr<ChainModel>> CreateTorchScriptModel(const ParamValues& params,
                                                                   const ModelContext& context) {
  ASSIGN_OR_RETURN(TorchScriptFacts facts, TorchScriptFactsFor(params));
  ASSIGN_OR_RETURN(const std::string bytes, ReadModelFile(params));
  ASSIGN_OR_RETURN(torch::jit::Module module, LoadModule(params, bytes, context.device));
  return RunTorch([&] {
    return std::static_pointer_cast<ChainModel>(std::make_shared<TorchScriptModel>(
        params, std::move(module), std::move(facts), context.device));
  });
}

TorchScriptModel::TorchScriptModel(ParamValues params, torch::jit::Module module,
                                   TorchScriptFacts facts, c10::Device device)
    : params_(std::move(params)),
      module_(std::move(module)),
      facts_(std::move(facts)),
      device_(device) {
  for (const torch::jit::Module& child : module_.children()) stages_.push_back(child);
  if (IsChainFile(params_)) {
    file_batch_ = ReadFileBatch(params_, module_).value().tensors;  // Check read it
  }
  state_.resize(stages_.size());
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < stages_.size(); ++i) {
    if (!facts_.stages.at(i).updates_state) continue;
    for (const auto& owner : stages_[i].named_modules()) {
      for (const auto& buffer : owner.value.named_buffers(/*recurse=*/false)) {
        state_[i].push_back(
            {owner.value, buffer.name, buffer.value, buffer.value.clone(), buffer.value.clone()});
      }
    }
  }
}

namespace {
// While it lives, a rerun's stand-ins hold the state the first run began with, in the buffers'
// places (TorchScriptModel::StateSlot); the buffers go back when it ends, also on a throw.
template <typename Slots>
class StandIns {
 public:
  explicit StandIns(Slots& slots) : slots_(slots) {
    c10::NoGradGuard no_grad;
    for (auto& slot : slots_) {
      slot.stand_in.copy_(slot.before);
      slot.owner.setattr(slot.name, slot.stand_in);
    }
  }
  ~StandIns() {
    for (auto& slot : slots_) slot.owner.setattr(slot.name, slot.buffer);
  }
  StandIns(const StandIns&) = delete;
  StandIns& operator=(const StandIns&) = delete;

 private:
  Slots& slots_;
};
}  // namespace

std::vector<at::Tensor> TorchScriptModel::RunStage(int index, const std::vector<at::Tensor>& inputs,
                                                   const StageParts&, const Batch&) {
  std::vector<at::Tensor> x = inputs;
  for (const int k : facts_.written_inputs[index]) {
    if (k < static_cast<int>(x.size()) && x[k].defined()) x[k] = x[k].clone();
  }
  std::vector<StateSlot>& state = state_[index];
  std::optional<StandIns<std::vector<StateSlot>>> stand_ins;
  if (!state.empty() && InRerun()) {
    stand_ins.emplace(state);
  } else if (!state.empty()) {
    c10::NoGradGuard no_grad;
    for (StateSlot& slot : state) slot.before.copy_(slot.buffer);
  }
  return TensorsOf(stages_[index].forward(ArgumentsOf(facts_.packing[index], x)),
                   facts_.stages[index].name);
}

at::Tensor TorchScriptModel::Loss(const std::vector<at::Tensor>& outputs, const Batch& batch) {
  const at::Tensor& y = outputs.at(0);
  if (facts_.loss == TorchScriptLoss::kOutput) return y;
  if (facts_.loss == TorchScriptLoss::kCrossEntropy && !batch.targets.empty()) {
    return at::cross_entropy_loss(y.reshape({-1, y.size(-1)}), batch.targets.at(0).reshape({-1}));
  }
  return y.pow(2).mean();
}

Batch TorchScriptModel::MakeBatch(uint64_t seed) {
  if (IsChainFile(params_)) return Batch{CopiesOf(file_batch_), {}};  // the file's, every seed
  return DrawBatch(params_, seed, device_, InputDtype(module_));
}

std::vector<at::Tensor> TorchScriptModel::Parameters() {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : module_.parameters()) out.push_back(p);
  return out;
}

std::vector<at::Tensor> TorchScriptModel::State() {
  // The stages' and those beside them (a chain file's batch is no state).
  std::vector<at::Tensor> out = BuffersBesideStages(module_);
  for (const torch::jit::Module& stage : stages_) {
    for (const at::Tensor& b : stage.buffers()) out.push_back(b);
  }
  return out;
}

}  // namespace ckpt
