#include "core/base/zip.h"

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ckpt {
namespace {

// The records' signatures and fixed sizes (PKWARE's APPNOTE.TXT, 4.3).
constexpr uint64_t kEndSignature = 0x06054b50;      // end of central directory, 22 bytes
constexpr uint64_t kLocatorSignature = 0x07064b50;  // zip64 end locator, 20 bytes
constexpr uint64_t kEnd64Signature = 0x06064b50;    // zip64 end of central directory, 56 bytes
constexpr uint64_t kEntrySignature = 0x02014b50;    // central directory entry, 46 bytes
constexpr uint64_t kLocalSignature = 0x04034b50;    // local file header, 30 bytes
constexpr uint64_t kNone32 = 0xFFFFFFFF;            // a 32-bit field whose value is zip64's

bool Inside(absl::string_view bytes, uint64_t at, uint64_t n) {
  return at <= bytes.size() && n <= bytes.size() - at;
}

// The `n`-byte little-endian number at `at` (the caller checked that it lies inside `bytes`).
uint64_t Number(absl::string_view bytes, uint64_t at, int n) {
  uint64_t value = 0;
  for (int i = n - 1; i >= 0; --i) value = value << 8 | static_cast<unsigned char>(bytes[at + i]);
  return value;
}

absl::Status Unreadable(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("not a zip archive: ", why));
}

struct Directory {
  uint64_t offset = 0;
  uint64_t entries = 0;
};

absl::StatusOr<Directory> FindDirectory(absl::string_view zip) {
  if (zip.size() < 22) return Unreadable("too short to end its directory");
  // The end record, whose comment (at most 64 KiB) runs to the archive's end.
  const uint64_t last = zip.size() - 22;
  const uint64_t first = last > 0xFFFF ? last - 0xFFFF : 0;
  for (uint64_t at = last + 1; at-- > first;) {
    if (Number(zip, at, 4) != kEndSignature || Number(zip, at + 20, 2) != last - at) continue;
    const Directory classic{Number(zip, at + 16, 4), Number(zip, at + 10, 2)};
    if (classic.offset != kNone32 && classic.entries != 0xFFFF) return classic;
    // zip64: the locator just before the end record says where zip64's end record is.
    if (at < 20 || Number(zip, at - 20, 4) != kLocatorSignature) {
      return Unreadable("a zip64 directory without its locator");
    }
    const uint64_t end64 = Number(zip, at - 20 + 8, 8);
    if (!Inside(zip, end64, 56) || Number(zip, end64, 4) != kEnd64Signature) {
      return Unreadable("no zip64 end record where its locator says");
    }
    return Directory{Number(zip, end64 + 48, 8), Number(zip, end64 + 32, 8)};
  }
  return Unreadable("no end of its central directory");
}

// `member`'s 32-bit fields that say zip64 (kNone32) read from the entry's zip64 extra field
// (id 1: the size, the compressed size, the local header's offset, those it replaces, in order).
absl::Status Widen(absl::string_view extra, uint64_t& size, uint64_t& compressed, uint64_t& local) {
  for (uint64_t at = 0; Inside(extra, at, 4);) {
    const uint64_t id = Number(extra, at, 2), length = Number(extra, at + 2, 2);
    if (!Inside(extra, at + 4, length)) break;
    if (id == 1) {
      uint64_t next = at + 4;
      for (uint64_t* field : {&size, &compressed, &local}) {
        if (*field != kNone32) continue;
        if (next + 8 > at + 4 + length) return Unreadable("a zip64 field cut short");
        *field = Number(extra, next, 8);
        next += 8;
      }
      return absl::OkStatus();
    }
    at += 4 + length;
  }
  if (size == kNone32 || compressed == kNone32 || local == kNone32) {
    return Unreadable("a member's zip64 sizes missing");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<ZipMember>> FindZipMember(absl::string_view archive,
                                                       absl::string_view member) {
  absl::StatusOr<Directory> directory = FindDirectory(archive);
  if (!directory.ok()) return directory.status();
  absl::string_view folder;
  std::optional<ZipMember> found;
  uint64_t found_local = 0;
  uint64_t at = directory->offset;
  // Each entry is at least 46 bytes inside the archive: the loop ends by the archive's size.
  for (uint64_t i = 0; i < directory->entries; ++i) {
    if (!Inside(archive, at, 46) || Number(archive, at, 4) != kEntrySignature) {
      return Unreadable(absl::StrCat("its directory's entry ", i, " is not where it should be"));
    }
    const uint64_t name_length = Number(archive, at + 28, 2);
    const uint64_t extra_length = Number(archive, at + 30, 2);
    const uint64_t comment_length = Number(archive, at + 32, 2);
    if (!Inside(archive, at + 46, name_length + extra_length + comment_length)) {
      return Unreadable(absl::StrCat("its directory's entry ", i, " runs past its end"));
    }
    const absl::string_view name = archive.substr(at + 46, name_length);
    if (i == 0) {
      const size_t slash = name.find('/');
      if (slash == name.npos) return Unreadable("its first member is in no folder");
      folder = name.substr(0, slash);
    }
    if (name.size() == folder.size() + 1 + member.size() && absl::StartsWith(name, folder) &&
        name[folder.size()] == '/' && absl::EndsWith(name, member)) {
      ZipMember entry;
      entry.method = static_cast<int>(Number(archive, at + 10, 2));
      entry.size = Number(archive, at + 24, 4);
      uint64_t compressed = Number(archive, at + 20, 4);
      uint64_t local = Number(archive, at + 42, 4);
      absl::Status widened =
          Widen(archive.substr(at + 46 + name_length, extra_length), entry.size, compressed, local);
      if (!widened.ok()) return widened;
      if (entry.method == 0 && compressed != entry.size) {
        return Unreadable("a stored member whose two sizes differ");
      }
      found = entry;
      found_local = local;
    }
    at += 46 + name_length + extra_length + comment_length;
  }
  if (found.has_value() && found->method == 0) {
    // The bytes follow the local header, its name and its own extra field (PyTorch pads there).
    if (!Inside(archive, found_local, 30) || Number(archive, found_local, 4) != kLocalSignature) {
      return Unreadable("a member's local header is not where its directory says");
    }
    const uint64_t data = found_local + 30 + Number(archive, found_local + 26, 2) +
                          Number(archive, found_local + 28, 2);
    if (!Inside(archive, data, found->size)) return Unreadable("a member runs past its end");
    found->stored = archive.substr(data, found->size);
  }
  return found;
}

}  // namespace ckpt
