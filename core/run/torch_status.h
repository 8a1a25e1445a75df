// The one place where LibTorch's exceptions become absl::Status.
//
// LibTorch reports failures by throwing (c10::Error and its subclasses). Project APIs return
// Status instead; they run LibTorch work through RunTorch, which maps
//   c10::OutOfMemoryError (CPU cap, CUDA allocator) -> ResourceExhausted
//   any other c10::Error                             -> Internal
//   std::bad_alloc                                   -> ResourceExhausted
//   any other std::exception                         -> Internal
// keeping one line of the message: the line that says what went wrong (WhatWentWrong), without
// LibTorch's C++ backtrace. Nothing else catches LibTorch errors.
//
//   absl::StatusOr<double> loss = RunTorch([&] { return model.Loss(x).item<double>(); });
#pragma once

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ckpt {

// The line of a LibTorch error message that says what went wrong: an error raised inside
// TorchScript code is the exception's own line after the interpreter's traceback ("RuntimeError:
// <what>": <what>); others say it first, perhaps after "[enforce fail at file:line] . ".
std::string WhatWentWrong(absl::string_view message);

// Converts the exception being handled (call inside a catch block) to a Status.
absl::Status StatusFromCurrentException();

// Runs `fn`; returns its result (or OK for void) or the Status of what it threw.
template <typename Fn>
auto RunTorch(Fn&& fn) {
  using R = std::invoke_result_t<Fn>;
  if constexpr (std::is_void_v<R>) {
    try {
      std::forward<Fn>(fn)();
      return absl::OkStatus();
    } catch (...) {
      return StatusFromCurrentException();
    }
  } else {
    try {
      return absl::StatusOr<R>(std::forward<Fn>(fn)());
    } catch (...) {
      return absl::StatusOr<R>(StatusFromCurrentException());
    }
  }
}

}  // namespace ckpt
