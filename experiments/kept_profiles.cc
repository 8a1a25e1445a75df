#include "experiments/kept_profiles.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "c10/core/ScalarType.h"
#include "core/base/digest.h"
#include "core/base/files.h"
#include "core/run/device.h"

namespace ckpt {
namespace {

constexpr int64_t kMaxExecutableBytes = int64_t{1} << 32;
// About 800 models' profiles; read as tokens, a few hundred MB at most.
constexpr int64_t kMaxProfilesBytes = int64_t{1} << 24;

// A digest of this executable's file, or "" when it cannot be read.
const std::string& ExecutableDigest() {
  static const std::string* digest = [] {
    absl::StatusOr<std::string> bytes = ReadRegularFile("/proc/self/exe", kMaxExecutableBytes);
    return new std::string(bytes.ok() ? absl::StrFormat("%016x", Fnv1a64(*bytes)) : "");
  }();
  return *digest;
}

}  // namespace

std::string ProfileSetting(const WorkloadOptions& options, bool extrapolate) {
  if (ExecutableDigest().empty()) return "";
  const ProfileOptions& p = options.profile;
  return absl::StrCat(
      "executable ", ExecutableDigest(), "; ", DescribeRuntime(), "; device ", options.device.str(),
      "; autocast ", p.autocast ? c10::toString(*p.autocast) : "none", "; chunks ", p.chunks,
      "; timed ", p.timed ? absl::StrCat(p.min_repeats, "x", p.min_time_ms, "ms") : "no", "; link ",
      p.link_bytes_per_ms > 0 ? absl::StrCat(p.link_bytes_per_ms, "B/ms") : "measured",
      "; repeated stages ", p.reuse_repeated ? "measured once" : "each measured", "; extrapolated ",
      extrapolate ? "where the model declares sizes" : "no");
}

KeptProfiles KeptProfiles::Open(std::string path, std::string setting) {
  KeptProfiles kept(std::move(path), std::move(setting));
  absl::StatusOr<std::string> text = ReadRegularFile(kept.path_, kMaxProfilesBytes);
  if (text.status().code() == absl::StatusCode::kNotFound) return kept;
  absl::StatusOr<std::vector<KeyedProfile>> entries =
      text.ok() ? ProfilesFromText(*text)
                : absl::StatusOr<std::vector<KeyedProfile>>(text.status());
  if (entries.ok()) {
    kept.entries_ = *std::move(entries);
  } else {
    kept.note_ = absl::StrCat(kept.path_, " set aside (", entries.status().message(),
                              "): its models are profiled again, and it is replaced");
  }
  return kept;
}

// The part of a key after its setting: the model and what its spec names.
std::string ModelPart(const BoundModel& model) {
  const std::string digest = model.ContentDigest();
  return absl::StrCat("; model ", model.spec(), digest.empty() ? "" : "; file digest ", digest);
}

std::string KeptProfiles::Key(const BoundModel& model) const {
  return absl::StrCat(setting_, ModelPart(model));
}

std::optional<ModelProfile> KeptProfiles::Find(const BoundModel& model) const {
  if (setting_.empty()) return std::nullopt;
  for (const auto& [key, profile] : entries_) {
    if (key == Key(model)) return profile;
  }
  return std::nullopt;
}

std::string KeptProfiles::OtherSetting(const BoundModel& model) const {
  if (setting_.empty()) return "";
  const std::string spec_part = absl::StrCat("; model ", model.spec());
  for (const auto& [key, profile] : entries_) {
    const size_t at = key.find(spec_part);
    if (at == std::string::npos || key == Key(model)) continue;
    // The parts of this run's key that the kept one lacks, in order.
    const std::vector<std::string> kept_parts = absl::StrSplit(key, "; ");
    std::vector<std::string> differ;
    for (const absl::string_view part : absl::StrSplit(Key(model), "; ")) {
      if (std::find(kept_parts.begin(), kept_parts.end(), part) == kept_parts.end()) {
        differ.emplace_back(part);
      }
    }
    return absl::StrJoin(differ, "; ");
  }
  return "";
}

void KeptProfiles::Keep(const BoundModel& model, const ModelProfile& profile, Progress& progress) {
  if (setting_.empty()) return;
  const std::string spec = model.spec();
  const std::string key = Key(model);
  bool replaced = false;
  for (auto& [k, p] : entries_) {
    if (k != key) continue;
    p = profile;
    replaced = true;
  }
  if (!replaced) entries_.emplace_back(key, profile);
  const absl::Status written = WriteFileAtomically(path_, ProfilesToText(entries_));
  if (!written.ok()) {
    progress.Line(absl::StrCat(spec, ": its profile is not kept (", written.message(), ")"));
  }
}

}  // namespace ckpt
