#include "core/base/bytes.h"

#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
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
  int64_t whole = 0;
  double value = 0;
  // An integer count is exact whatever its size; otherwise a decimal, written so that NaN
  // (which SimpleAtod accepts) fails too.
  if (!number.empty() && absl::ascii_isdigit(number.front()) && absl::SimpleAtoi(number, &whole) &&
      whole <= std::numeric_limits<int64_t>::max() / unit) {
    return whole * unit;
  }
  if (number.empty() || !absl::ascii_isdigit(number.front()) || !absl::SimpleAtod(number, &value) ||
      !(value >= 0 && value * unit <= 9.2e18)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", Printable(text),
                     "' is not a size; accepted: a byte count, or a number with "
                     "GiB, MiB, KiB, GB, MB, kB or B (e.g. 16GiB, 1.5GiB, 512MiB, 25GB)"));
  }
  return static_cast<int64_t>(value * unit);
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

std::string DescribeBytes(int64_t bytes) {
  return absl::StrCat(bytes, " bytes (", FormatMib(bytes, 2), " MiB)");
}

}  // namespace ckpt
