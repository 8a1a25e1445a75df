#include "experiments/command_line.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace ckpt {
namespace {

std::string TypeOf(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return "true or false";
  if (flag.IsOfType<int>() || flag.IsOfType<int64_t>()) return "an integer";
  if (flag.IsOfType<uint64_t>() || flag.IsOfType<uint32_t>()) return "an integer >= 0";
  if (flag.IsOfType<double>() || flag.IsOfType<float>()) return "a number";
  return "text";
}

// The program's own flags (those defined beside its main, not Abseil's), for "accepted:".
std::string OwnFlags(const std::string& main_file) {
  std::vector<std::string> names;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->Filename() == main_file) names.push_back(absl::StrCat("--", name));
  }
  std::sort(names.begin(), names.end());
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::StatusOr<ParsedCommandLine> ReadCommandLine(int argc, char** argv) {
  ParsedCommandLine parsed;
  // Abseil's flags that read flags from elsewhere (a file, the environment): refused wherever
  // they stand, before anything else reads the command line, --help included.
  std::vector<char*> usage = {argv[0]};  // the program and the usage flags: all --help is given
  bool flags_end = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (flags_end || arg == "--") {
      flags_end = true;
      continue;
    }
    absl::string_view name = arg;
    if (!absl::ConsumePrefix(&name, "--")) absl::ConsumePrefix(&name, "-");
    name = name.substr(0, name.find('='));
    for (const char* elsewhere : {"flagfile", "fromenv", "tryfromenv", "undefok"}) {
      if (name == elsewhere || name == absl::StrCat("no", elsewhere)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name,
                         " is not supported; accepted: every flag on the command line "
                         "(--name=value; see --help)"));
      }
    }
    for (const char* help :
         {"help", "helpfull", "helpshort", "helppackage", "helpon", "helpmatch", "version"}) {
      if (name == help) usage.push_back(argv[i]);
    }
  }
  if (usage.size() > 1) {
    // Abseil prints what was asked and exits; it is handed nothing else of the command line.
    usage.push_back(nullptr);
    absl::ParseCommandLine(static_cast<int>(usage.size()) - 1, usage.data());
  }
  bool flags_done = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (flags_done || !absl::StartsWith(arg, "-") || arg == "-") {
      parsed.positional.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    absl::ConsumePrefix(&arg, "-");
    absl::ConsumePrefix(&arg, "-");
    const size_t equals = arg.find('=');
    std::string name(arg.substr(0, equals));
    const bool has_value = equals != absl::string_view::npos;
    std::string value = has_value ? std::string(arg.substr(equals + 1)) : "";
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) {
        flag = negated;
        name = name.substr(2);
        value = "false";
      }
    }
    if (flag == nullptr || flag->IsRetired()) {
      // Name the program's flags: those defined in the same file as its --help text's, which
      // is the file of any of them; find one through a flag every main here defines.
      absl::CommandLineFlag* device = absl::FindCommandLineFlag("device");
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag --", name,
          "; accepted: ", device != nullptr ? OwnFlags(device->Filename()) : "see --help"));
    }
    if (!has_value && value.empty()) {
      if (!flag->IsOfType<bool>()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value: --", name,
                                                       "=VALUE (", TypeOf(*flag), ": ",
                                                       flag->Help(), ")"));
      }
      value = "true";
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, "='", value,
                                                     "' is not accepted; accepted: ", TypeOf(*flag),
                                                     " (", flag->Help(), ")"));
    }
    parsed.given.insert(name);
  }
  return parsed;
}

}  // namespace ckpt
