// main() for tests that run LibTorch: one compute thread (tests run two at a time on small
// machines, and results must not depend on thread scheduling) and the CPU memory meter
// installed before any tensor exists, so every tensor a test makes is counted.
#include <cstdio>

#include "c10/core/Device.h"
#include "core/device.h"
#include "core/memory_meter.h"
#include "gtest/gtest.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (absl::Status s = ckpt::SetComputeThreads(1); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  if (!ckpt::MemoryMeterFor(c10::Device(c10::DeviceType::CPU)).ok()) return 2;
  return RUN_ALL_TESTS();
}
