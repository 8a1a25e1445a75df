#include "core/stage.h"

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
  }
  return "unknown";
}

absl::string_view PartActionName(PartAction action) {
  switch (action) {
    case PartAction::kStore:
      return "stored";
    case PartAction::kRecompute:
      return "recomputed";
    case PartAction::kChunk:
      return "chunked";
  }
  return "unknown";
}

PartInfo AttentionCorePart() {
  return {"core", PartKind::kAttentionCore, {PartAction::kRecompute}};
}
PartInfo MlpHiddenPart() { return {"hidden", PartKind::kMlpHidden, {PartAction::kRecompute}}; }
PartInfo SequencePart(int64_t extent, std::string name) {
  return {std::move(name), PartKind::kSequence, {PartAction::kChunk}, extent};
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

bool StagePolicy::IsDefault() const {
  return std::all_of(parts.begin(), parts.end(),
                     [](const PartPolicy& p) { return p.action == PartAction::kStore; });
}

int StagePolicy::Chunks() const {
  for (const PartPolicy& p : parts) {
    if (p.action == PartAction::kChunk) return p.chunks;
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
  if (index < 0) return policy;
  const std::vector<PartAction>& allowed = stage.parts[index].actions;
  if (part.action != PartAction::kStore &&
      std::find(allowed.begin(), allowed.end(), part.action) == allowed.end()) {
    return policy;
  }
  if (part.action == PartAction::kChunk && part.chunks < 2) part = PartPolicy();
  policy.parts.resize(stage.parts.size());
  policy.parts[index] = part;
  return policy;
}

std::string DescribePolicy(const StageInfo& stage, const StagePolicy& policy) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < stage.parts.size(); ++i) {
    const PartPolicy p = policy.Of(static_cast<int>(i));
    if (p.action == PartAction::kRecompute) parts.push_back(stage.parts[i].name + " recomputed");
    if (p.action == PartAction::kChunk) {
      parts.push_back(absl::StrCat(stage.parts[i].name, " in ", p.chunks, " chunks"));
    }
  }
  return parts.empty() ? "stored" : absl::StrJoin(parts, ", ");
}

std::vector<StagePolicy> PolicyMenu(const StageInfo& stage, int chunks) {
  std::vector<StagePolicy> menu = {StagePolicy()};
  for (size_t i = 0; i < stage.parts.size(); ++i) {
    const PartInfo& part = stage.parts[i];
    const int part_chunks =
        part.extent > 0 ? static_cast<int>(std::min<int64_t>(chunks, part.extent)) : chunks;
    for (PartAction action : part.actions) {
      if (action == PartAction::kStore || (action == PartAction::kChunk && part_chunks < 2)) {
        continue;
      }
      StagePolicy policy;
      policy.parts.resize(stage.parts.size());
      policy.parts[i] = {action, action == PartAction::kChunk ? part_chunks : 1};
      menu.push_back(policy);
    }
  }
  return menu;
}

}  // namespace ckpt
