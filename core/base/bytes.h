// Byte sizes, read and written in one place: every flag, spec parameter and budget that takes a
// size is parsed by ParseByteSize, and every table, message and report prints bytes through
// the formatters below. Needs no LibTorch.
//
//   ASSIGN_OR_RETURN(int64_t budget, ParseByteSize("1.5GiB"));  // 1610612736
//   FormatByteSize(budget);  // "1536MiB", which ParseByteSize reads back exactly
//   FormatMib(budget, 2);    // "1536.00", for a table whose column says MiB
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ckpt {

// A size in bytes: a whole byte count (with or without B), or a decimal number with a unit KiB,
// MiB or GiB, or kB, MB or GB ("12MiB", "1.5GiB", "25GB"), rounded down to whole bytes, exactly.
// Digits and one point only: no sign, exponent, hexadecimal or spaces. InvalidArgument naming
// the text for anything else, a fraction of a byte, or a size beyond int64.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);
// The shortest exact writing of `bytes` in that grammar: "12MiB", "1536MiB", "1000".
std::string FormatByteSize(int64_t bytes);
// `bytes` in MiB or GiB with `decimals` decimals, without the unit: "29.69".
std::string FormatMib(int64_t bytes, int decimals);
std::string FormatGib(int64_t bytes, int decimals);
// A byte count for a reader: "31135616 bytes (29.69 MiB)".
std::string DescribeBytes(int64_t bytes);
// A size for prose, in the largest binary unit it holds one of, two decimals: "2.41 GiB",
// "29.69 MiB", "1.50 KiB", "1000 bytes" (never "0.00 GiB").
std::string FormatSize(int64_t bytes);

}  // namespace ckpt
