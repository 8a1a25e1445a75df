// The mains' command-line parsing: Abseil's flags, with bad input handled as every other bad
// input of ckptlab is (an error naming the value and what is accepted, which the main prints as
// one line and ends with exit status 2, nothing written), which absl::ParseCommandLine does not
// do (it exits 1, naming no accepted values). Defines no flag: each main defines its own.
//
//   absl::StatusOr<ParsedCommandLine> parsed = ReadCommandLine(argc, argv);
//   if (parsed->given.count("models")) ...  // given explicitly, even if empty
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt {

struct ParsedCommandLine {
  std::vector<std::string> positional;  // arguments that are not flags (after argv[0])
  std::set<std::string> given;          // the flags given on the command line, by name
};

// Sets the flags from `argv` ("--name=value"; a bool also as "--name" or "--noname"; "--" ends
// the flags). --help and its kin are Abseil's (they print and exit 0), handed only the usage
// flags. An unknown flag, a flag without a value, a value the flag's type refuses, or, wherever
// it stands (with --help too), one of Abseil's flags that read flags from a file or the
// environment (--flagfile, --fromenv, --tryfromenv, --undefok): InvalidArgument saying which.
absl::StatusOr<ParsedCommandLine> ReadCommandLine(int argc, char** argv);

}  // namespace ckpt
