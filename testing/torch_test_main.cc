// main() for tests that run LibTorch: one compute thread (tests run two at a time on small
// machines, and results must not depend on thread scheduling) and the CPU memory meter
// installed before any tensor exists, so every tensor a test makes is counted.
//
// CKPT_TEST_DEVICE=cuda runs the tests that support it (the conformance suite) on the GPU,
// with LibTorch's deterministic algorithms requested; the rest stay on CPU.
//
// The host pools check copy order (HostPool::CheckOrder): a copy's result read before its
// fence's Wait() is poison, so an offloading plan whose executor skipped a wait fails its
// gradient checks.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ATen/Context.h"
#include "c10/core/Device.h"
#include "core/run/device.h"
#include "core/run/host_pool.h"
#include "core/run/memory_meter.h"
#include "gtest/gtest.h"
#include "testing/model_cases.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (absl::Status s = ckpt::SetComputeThreads({/*intra_op=*/1, /*blas=*/1}).status(); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  if (!ckpt::MemoryMeterFor(c10::Device(c10::DeviceType::CPU)).ok()) return 2;
  const char* device_name = std::getenv("CKPT_TEST_DEVICE");
  if (device_name != nullptr && std::string(device_name) != "cpu") {
    // cuBLAS is deterministic only with a fixed workspace, set before CUDA starts.
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    absl::StatusOr<c10::Device> device = ckpt::ResolveDevice(device_name);
    if (!device.ok()) {
      std::fprintf(stderr, "CKPT_TEST_DEVICE: %s\n",
                   std::string(device.status().message()).c_str());
      return 2;
    }
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
    ckpt::testing::SetTestDevice(*device);
    std::fprintf(stderr, "tests that support it run on %s\n", device->str().c_str());
  }
  for (const c10::Device& d : {c10::Device(c10::DeviceType::CPU), ckpt::testing::TestDevice()}) {
    absl::StatusOr<ckpt::HostPool*> pool = ckpt::HostPoolFor(d);
    if (!pool.ok()) {
      std::fprintf(stderr, "host pool: %s\n", std::string(pool.status().message()).c_str());
      return 2;
    }
    (*pool)->CheckOrder(true);
  }
  return RUN_ALL_TESTS();
}
