#include "core/run/torch_status.h"

#include <new>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "c10/util/Exception.h"

namespace ckpt {

std::string WhatWentWrong(absl::string_view message) {
  if (absl::StartsWith(message, "The following operation failed in the TorchScript interpreter")) {
    // The traceback's code lines are indented; the exception's own line is not: "RuntimeError:
    // <what>", "builtins.ValueError: <what>".
    const std::vector<absl::string_view> lines = absl::StrSplit(message, '\n');
    for (auto line = lines.rbegin(); line != lines.rend(); ++line) {
      const size_t colon = line->find(": ");
      if (line->empty() || line->front() == ' ' || colon == absl::string_view::npos) continue;
      const absl::string_view type = line->substr(0, colon);
      if (type.find(' ') == absl::string_view::npos &&
          (absl::EndsWith(type, "Error") || absl::EndsWith(type, "Exception"))) {
        message.remove_prefix(line->data() + colon + 2 - message.data());
        break;
      }
    }
  }
  if (absl::StartsWith(message, "[enforce fail at ")) {
    const size_t end = message.find("] . ");
    if (end != absl::string_view::npos) message.remove_prefix(end + 4);
  }
  return std::string(message.substr(0, message.find('\n')));
}

absl::Status StatusFromCurrentException() {
  try {
    throw;
  } catch (const c10::OutOfMemoryError& e) {
    return absl::ResourceExhaustedError(WhatWentWrong(e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    return absl::InternalError(WhatWentWrong(e.what_without_backtrace()));
  } catch (const std::bad_alloc& e) {
    return absl::ResourceExhaustedError(e.what());
  } catch (const std::exception& e) {
    return absl::InternalError(WhatWentWrong(e.what()));
  }
  // Anything not derived from std::exception is not ours to swallow.
}

}  // namespace ckpt
