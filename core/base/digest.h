// A 64-bit FNV-1a digest of text: what a run records of the files it read (plan files in
// run.csv) and what keys alike TorchScript stages. Not for security: it tells changed files and
// different code apart, nothing more. Needs no LibTorch.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"

namespace ckpt {

inline uint64_t Fnv1a64(absl::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace ckpt
