#include "core/base/bytes.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "core/base/printable.h"

namespace ckpt {

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  absl::string_view number = text;
  int64_t unit = 1;
  for (const auto& [suffix, factor] :
       std::vector<std::pair<absl::string_view, int64_t>>{{"GiB", int64_t{1} << 30},
                                                          {"MiB", int64_t{1} << 20},
                                                          {"KiB", int64_t{1} << 10},
                                                          {"GB", 1000 * 1000 * 1000},
                                                          {"MB", 1000 * 1000},
                                                          {"kB", 1000},
                                                          {"B", 1}}) {
    if (absl::ConsumeSuffix(&number, suffix)) {
      unit = factor;
      break;
    }
  }
  const auto refused = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", Printable(text), "' is not a size", why,
        "; accepted: a whole byte count, or a decimal number with GiB, MiB, KiB, GB, MB or kB "
        "(e.g. 16GiB, 1.5GiB, 512MiB, 25GB), at most 2^63 - 1 bytes"));
  };
  // Digits, then a point and digits: nothing else (no sign, exponent, hexadecimal or spaces).
  const size_t point = number.find('.');
  const absl::string_view whole = number.substr(0, point);
  const absl::string_view fraction =
      point == absl::string_view::npos ? absl::string_view() : number.substr(point + 1);
  const auto digits = [](absl::string_view d) {
    return !d.empty() && std::all_of(d.begin(), d.end(), absl::ascii_isdigit);
  };
  if (!digits(whole) || (point != absl::string_view::npos && !digits(fraction))) {
    return refused("");
  }
  if (point != absl::string_view::npos && unit == 1) return refused(" (a fraction of a byte)");
  if (fraction.size() > 18) return refused(" (more than 18 digits after the point)");
  // Exact: floor((whole + fraction) x unit), in 128 bits.
  __int128 bytes = 0;
  for (const char c : whole) {
    bytes = bytes * 10 + (c - '0');
    if (bytes > std::numeric_limits<int64_t>::max()) return refused(" (too large)");
  }
  bytes *= unit;
  __int128 numerator = 0, scale = 1;
  for (const char c : fraction) {
    numerator = numerator * 10 + (c - '0');
    scale *= 10;
  }
  bytes += numerator * unit / scale;
  if (bytes > std::numeric_limits<int64_t>::max()) return refused(" (too large)");
  return static_cast<int64_t>(bytes);
}

std::string FormatByteSize(int64_t bytes) {
  for (const auto& [suffix, factor] : std::vector<std::pair<const char*, int64_t>>{
           {"GiB", int64_t{1} << 30}, {"MiB", int64_t{1} << 20}, {"KiB", int64_t{1} << 10}}) {
    if (bytes != 0 && bytes % factor == 0) return absl::StrCat(bytes / factor, suffix);
  }
  return absl::StrCat(bytes);
}

std::string FormatMib(int64_t bytes, int decimals) {
  return absl::StrFormat("%.*f", decimals, bytes / 1048576.0);
}

std::string FormatGib(int64_t bytes, int decimals) {
  return absl::StrFormat("%.*f", decimals, bytes / 1073741824.0);
}

std::string FormatSize(int64_t bytes) {
  for (const auto& [suffix, factor] : std::vector<std::pair<const char*, int64_t>>{
           {"GiB", int64_t{1} << 30}, {"MiB", int64_t{1} << 20}, {"KiB", int64_t{1} << 10}}) {
    if (bytes >= factor) return absl::StrFormat("%.2f %s", bytes / double(factor), suffix);
  }
  return absl::StrCat(bytes, " bytes");
}

std::string DescribeBytes(int64_t bytes) {
  return absl::StrCat(bytes, " bytes (", FormatMib(bytes, 2), " MiB)");
}

}  // namespace ckpt
