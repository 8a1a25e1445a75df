#include "core/plan/stage.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ckpt {

absl::string_view StageKindName(StageKind kind) {
  switch (kind) {
    case StageKind::kEmbedding:
      return "embedding";
    case StageKind::kAttention:
      return "attention";
    case StageKind::kMlp:
      return "mlp";
    case StageKind::kNorm:
      return "norm";
    case StageKind::kHead:
      return "head";
    case StageKind::kOther:
      return "other";
  }
  return "unknown";
}

absl::string_view PartKindName(PartKind kind) {
  switch (kind) {
    case PartKind::kAttentionCore:
      return "attention core";
    case PartKind::kMlpHidden:
      return "MLP hidden";
    case PartKind::kSequence:
      return "sequence";
    case PartKind::kNorm:
      return "norm";
  }
  return "unknown";
}

const std::vector<PartActionDef>& PartActionTable() {
  using K = PartKind;
  using M = PartMechanism;
  static const auto* table = new std::vector<PartActionDef>{
      {"store", "stored", M::kPlain, {K::kAttentionCore, K::kMlpHidden, K::kSequence, K::kNorm}},
      {"recompute", "recomputed", M::kCheckpoint, {K::kAttentionCore, K::kMlpHidden}},
      {"recompute", "recomputed", M::kDropOutput, {K::kNorm}},
      {"chunk", "chunked", M::kChunks, {K::kSequence}},
      {"fused", "fused", M::kFused, {K::kAttentionCore}},
  };
  return *table;
}

std::optional<PartAction> PartAction::Find(absl::string_view id, PartKind kind) {
  const std::vector<PartActionDef>& table = PartActionTable();
  for (size_t i = 0; i < table.size(); ++i) {
    const PartAction action(static_cast<int>(i));
    if (table[i].id == id && action.AppliesTo(kind)) return action;
  }
  return std::nullopt;
}

bool PartAction::AppliesTo(PartKind kind) const {
  const std::vector<PartKind>& kinds = def().kinds;
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

PartAction PartAction::Recompute(PartKind kind) { return *Find("recompute", kind); }
PartAction PartAction::Chunk() { return *Find("chunk", PartKind::kSequence); }
PartAction PartAction::Fused() { return *Find("fused", PartKind::kAttentionCore); }

std::vector<PartAction> ActionsFor(const PartInfo& part) {
  std::vector<PartAction> actions;
  for (size_t i = 1; i < PartActionTable().size(); ++i) {
    const std::optional<PartAction> action = PartAction::Find(PartActionTable()[i].id, part.kind);
    if (!action.has_value() ||
        std::find(actions.begin(), actions.end(), *action) != actions.end()) {
      continue;
    }
    if (action->def().mechanism == PartMechanism::kFused && !part.unfusable.empty()) continue;
    actions.push_back(*action);
  }
  return actions;
}

PartInfo AttentionCorePart(std::string unfusable) {
  PartInfo part{"core", PartKind::kAttentionCore};
  part.unfusable = std::move(unfusable);
  return part;
}
PartInfo MlpHiddenPart() { return {"hidden", PartKind::kMlpHidden}; }
PartInfo NormPart(std::string name) { return {std::move(name), PartKind::kNorm}; }
PartInfo SequencePart(int64_t extent, std::string name) {
  return {std::move(name), PartKind::kSequence, extent};
}

int StageInfo::FindPart(PartKind part_kind) const {
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].kind == part_kind) return static_cast<int>(i);
  }
  return -1;
}

double ForwardFlops(const std::vector<StageInfo>& stages) {
  double flops = 0;
  for (const StageInfo& stage : stages) flops += stage.forward_flops;
  return flops;
}

int64_t BufferBytes(const std::vector<StageInfo>& stages) {
  int64_t bytes = 0;
  for (const StageInfo& stage : stages) bytes += stage.buffer_bytes;
  return bytes;
}

bool StagePolicy::IsDefault() const {
  return std::all_of(parts.begin(), parts.end(),
                     [](const PartPolicy& p) { return p.action.IsStore(); });
}

bool StagePolicy::RunsFused() const {
  return std::any_of(parts.begin(), parts.end(), [](const PartPolicy& p) {
    return p.action.def().mechanism == PartMechanism::kFused;
  });
}

int StagePolicy::Chunks() const {
  for (const PartPolicy& p : parts) {
    if (p.action.Counted()) return p.chunks;
  }
  return 1;
}

PartPolicy StagePolicy::Of(int index) const {
  return index >= 0 && index < static_cast<int>(parts.size()) ? parts[index] : PartPolicy();
}

namespace {
// Both policies over the same number of parts (the longer one's count), empty ones filled in.
std::pair<std::vector<PartPolicy>, std::vector<PartPolicy>> Aligned(const StagePolicy& a,
                                                                    const StagePolicy& b) {
  const size_t n = std::max(a.parts.size(), b.parts.size());
  std::vector<PartPolicy> x(n), y(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = a.Of(static_cast<int>(i));
    y[i] = b.Of(static_cast<int>(i));
  }
  return {x, y};
}
}  // namespace

bool operator==(const StagePolicy& a, const StagePolicy& b) {
  const auto [x, y] = Aligned(a, b);
  return x == y;
}

bool operator<(const StagePolicy& a, const StagePolicy& b) {
  const auto [x, y] = Aligned(a, b);
  return x < y;
}

StagePolicy WithPart(const StageInfo& stage, StagePolicy policy, PartKind kind, PartPolicy part) {
  const int index = stage.FindPart(kind);
  if (index < 0 || !part.action.AppliesTo(kind)) return policy;
  if (part.action.Counted() && part.chunks < 2) part = PartPolicy();
  policy.parts.resize(stage.parts.size());
  policy.parts[index] = part;
  return policy;
}

std::string DescribePolicy(const StageInfo& stage, const StagePolicy& policy) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < stage.parts.size(); ++i) {
    const PartPolicy p = policy.Of(static_cast<int>(i));
    if (p.action.IsStore()) continue;
    parts.push_back(p.action.Counted()
                        ? absl::StrCat(stage.parts[i].name, " in ", p.chunks, " chunks")
                        : absl::StrCat(stage.parts[i].name, " ", p.action.def().done));
  }
  return parts.empty() ? "stored" : absl::StrJoin(parts, ", ");
}

std::vector<StagePolicy> PolicyMenu(const StageInfo& stage, int chunks) {
  std::vector<StagePolicy> menu = {StagePolicy()};
  for (size_t i = 0; i < stage.parts.size(); ++i) {
    const PartInfo& part = stage.parts[i];
    const int part_chunks =
        part.extent > 0 ? static_cast<int>(std::min<int64_t>(chunks, part.extent)) : chunks;
    for (const PartAction action : ActionsFor(part)) {
      if (action.Counted() && part_chunks < 2) continue;
      StagePolicy policy;
      policy.parts.resize(stage.parts.size());
      policy.parts[i] = {action, action.Counted() ? part_chunks : 1};
      menu.push_back(policy);
    }
  }
  return menu;
}

}  // namespace ckpt
