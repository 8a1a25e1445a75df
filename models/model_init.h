// Seeded parameter initialisation that leaves the caller's random stream untouched.
#pragma once

#include <cstdint>
#include <mutex>

#include "ATen/Context.h"
#include "core/run/rng.h"

namespace ckpt {

// Builds a module with the CPU generator seeded by `seed`, then restores the generator.
template <typename Build>
auto InitSeeded(uint64_t seed, Build&& build) {
  const RngState saved = CaptureRng({});
  {
    at::Generator gen = at::globalContext().defaultGenerator(c10::DeviceType::CPU);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed);
  }
  auto module = build();
  RestoreRng(saved);
  return module;
}

}  // namespace ckpt
