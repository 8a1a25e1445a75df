// One member of a zip archive found from its central directory, nothing decompressed: what
// ckptlab reads of a TorchScript file before LibTorch does. Needs no LibTorch.
//
//   ASSIGN_OR_RETURN(std::optional<ZipMember> writer, FindZipMember(bytes, "extra/ckptlab_torch"));
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ckpt {

struct ZipMember {
  int method = 0;            // 0: stored; else how it is compressed (8: deflated)
  uint64_t size = 0;         // its bytes, uncompressed
  absl::string_view stored;  // those bytes, inside the archive, where it is stored
};

// The member named "<folder>/<member>" of the zip archive `archive`, where <folder> is the first
// member's folder (PyTorch's layout: "archive/data.pkl", "archive/extra/..."), names compared
// exactly; of several so named, the last. nullopt where there is none. InvalidArgument saying
// what, where the archive's directory (zip64's records read too) or that member's place cannot
// be read inside `archive`.
absl::StatusOr<std::optional<ZipMember>> FindZipMember(absl::string_view archive,
                                                       absl::string_view member);

}  // namespace ckpt
