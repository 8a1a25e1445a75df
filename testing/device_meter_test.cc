// The memory meter and host pool of the test device, through their interfaces alone: the CPU's
// by default, the GPU's with CKPT_TEST_DEVICE=cuda (tools/gpu/run.sh runs this binary so).
//
// The first test asks for the meter and uses it before any tensor exists on the device, as
// the sweep does (it sets the memory cap before it builds a model). On CUDA this is the case
// that LibTorch 2.x answers with "Allocator not initialized for device" unless the meter
// starts CUDA itself; gtest runs a file's tests in the order they are written, so keep it first.
#include <cstdint>
#include <optional>

#include "ATen/ops/arange.h"
#include "ATen/ops/empty.h"
#include "ATen/ops/randn.h"
#include "absl/status/status.h"
#include "core/run/host_pool.h"
#include "core/run/memory_meter.h"
#include "core/run/torch_compat.h"
#include "core/run/torch_status.h"
#include "gtest/gtest.h"
#include "testing/model_cases.h"

namespace ckpt {
namespace {

using ::ckpt::testing::TestDevice;

MemoryMeter& Meter() {
  absl::StatusOr<MemoryMeter*> meter = MemoryMeterFor(TestDevice());
  EXPECT_TRUE(meter.ok()) << meter.status();
  return **meter;
}

at::Tensor Floats(int64_t n) { return at::empty({n}, at::device(TestDevice())); }

// Bytes the meter's live count moves by for a tensor of `bytes`: exact on CPU and with
// LibTorch 2.1+'s requested bytes on CUDA; 1.13's CUDA count is in 512-byte blocks.
int64_t Counted(int64_t bytes) {
  if (TestDevice().is_cpu() || compat::kRequestedBytesExact) return bytes;
  return (bytes + 511) / 512 * 512;
}

TEST(DeviceMemoryMeter, UsableBeforeAnyTensorExistsOnTheDevice) {
  absl::StatusOr<MemoryMeter*> meter = MemoryMeterFor(TestDevice());
  ASSERT_TRUE(meter.ok()) << meter.status();
  EXPECT_TRUE((*meter)->SetCap(std::nullopt).ok());
  (*meter)->ResetPeak();
  const MemoryStats s = (*meter)->Stats();
  EXPECT_EQ(s.peak_bytes, s.live_bytes);
  EXPECT_GE(s.reserved_bytes, s.allocated_bytes);
  EXPECT_FALSE((*meter)->Describe().empty());
}

TEST(DeviceMemoryMeter, LiveAndPeakFollowTheTensors) {
  const int64_t before = Meter().Stats().live_bytes;
  Meter().ResetPeak();
  { at::Tensor big = Floats(250000); }  // 1 MB, freed at once
  at::Tensor kept = Floats(1000);       // 4000 bytes, kept
  const MemoryStats s = Meter().Stats();
  EXPECT_EQ(s.live_bytes - before, Counted(4000));
  EXPECT_EQ(s.peak_bytes - before, Counted(1000000));
  EXPECT_GE(s.allocated_bytes, s.live_bytes);
  EXPECT_GE(s.reserved_bytes, s.allocated_bytes);
  kept.reset();
  EXPECT_EQ(Meter().Stats().live_bytes, before);
}

TEST(DeviceMemoryMeter, AnAllocationPastTheCapIsResourceExhausted) {
  // On CUDA the cap bounds the bytes the caching allocator reserves, cached free blocks
  // included, so hand those back first; 1 MiB of headroom cannot take a 64 MiB tensor there
  // (nor on CPU, where the cap bounds live bytes).
  Meter().ReleaseCached();
  const MemoryStats s = Meter().Stats();
  ASSERT_TRUE(Meter().SetCap(s.reserved_bytes + (1 << 20)).ok());
  absl::Status too_big = RunTorch([] { Floats(16 << 20); });
  ASSERT_TRUE(Meter().SetCap(std::nullopt).ok());
  EXPECT_EQ(too_big.code(), absl::StatusCode::kResourceExhausted) << too_big;
  EXPECT_EQ(Meter().Stats().live_bytes, s.live_bytes);     // the failed step left nothing behind
  absl::Status fits = RunTorch([] { Floats(16 << 20); });  // and without the cap it fits
  EXPECT_TRUE(fits.ok()) << fits;
}

TEST(DeviceMemoryMeter, ABadCapIsRejectedWithTheAcceptedRange) {
  absl::Status negative = Meter().SetCap(-1);
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument) << negative;
  EXPECT_NE(negative.message().find("-1"), absl::string_view::npos) << negative;
}

HostPool& Pool() {
  absl::StatusOr<HostPool*> pool = HostPoolFor(TestDevice());
  EXPECT_TRUE(pool.ok()) << pool.status();
  return **pool;
}

// A float tensor, an index tensor and an undefined one, as stage boundaries hold them.
std::vector<at::Tensor> Boundary() {
  return {at::randn({3, 5}, at::device(TestDevice())),
          at::arange(7, at::device(TestDevice()).dtype(at::kLong)), at::Tensor()};
}

int64_t Bytes(const std::vector<at::Tensor>& ts) {
  int64_t bytes = 0;
  for (const at::Tensor& t : ts) bytes += t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
  return bytes;
}

void ExpectEqual(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].defined(), b[i].defined()) << i;
    if (a[i].defined()) {
      EXPECT_TRUE(a[i].cpu().equal(b[i].cpu())) << i;
    }
  }
}

TEST(HostPool, ARoundTripGivesTheValuesBackAndCountsHostBytesUntilTheCopyBackIsDone) {
  const std::vector<at::Tensor> x = Boundary();
  const int64_t before = Pool().Stats().live_bytes;
  Pool().ResetPeak();
  Transfer out = Pool().ToHost(x);
  ASSERT_EQ(out.tensors.size(), x.size());
  EXPECT_TRUE(out.tensors[0].device().is_cpu());
  EXPECT_FALSE(out.tensors[2].defined());
  EXPECT_EQ(Pool().Stats().live_bytes - before, Bytes(x));
  out.done->Wait();
  Transfer back = Pool().ToDevice(out.tensors, TestDevice());
  out.tensors.clear();
  EXPECT_EQ(Pool().Stats().live_bytes - before, Bytes(x));  // the copy back still reads them
  back.done->Wait();
  EXPECT_EQ(Pool().Stats().live_bytes, before);
  EXPECT_EQ(Pool().Stats().peak_bytes - before, Bytes(x));
  EXPECT_EQ(back.tensors[0].device(), x[0].device());
  ExpectEqual(back.tensors, x);
}

TEST(HostPool, CopiesStoragesOnceAndKeepHowTensorsShareThem) {
  // A tensor named twice, a view of it, and a zero-element view of another that keeps all of it:
  // as a stage boundary can hold them.
  const at::Tensor x = at::randn({3, 5}, at::device(TestDevice()));
  const at::Tensor y = at::randn({4, 2}, at::device(TestDevice()));
  const std::vector<at::Tensor> boundary = {x, x, x.t(), y.narrow(1, 0, 0)};
  const int64_t before = Pool().Stats().live_bytes;
  Transfer out = Pool().ToHost(boundary);
  EXPECT_EQ(out.bytes, static_cast<int64_t>(x.nbytes() + y.nbytes()));
  EXPECT_EQ(Pool().Stats().live_bytes - before, static_cast<int64_t>(x.nbytes() + y.nbytes()));
  out.done->Wait();
  Transfer back = Pool().ToDevice(out.tensors, TestDevice());
  out.tensors.clear();
  back.done->Wait();
  const std::vector<at::Tensor>& b = back.tensors;
  ASSERT_EQ(b.size(), 4u);
  EXPECT_TRUE(b[0].is_same(b[1]));
  EXPECT_TRUE(b[2].is_alias_of(b[0]));
  EXPECT_EQ(static_cast<int64_t>(b[3].storage().nbytes()), static_cast<int64_t>(y.nbytes()));
  EXPECT_EQ(b[0].storage().nbytes(), x.nbytes());
  ExpectEqual(b, boundary);
}

TEST(HostPool, CopiesRunInIssueOrder) {
  // The copy back is issued before the copy out was waited for, and still reads its result.
  const std::vector<at::Tensor> x = Boundary();
  Transfer out = Pool().ToHost(x);
  Transfer back = Pool().ToDevice(out.tensors, TestDevice());
  back.done->Wait();
  ExpectEqual(back.tensors, x);
}

TEST(HostPool, ACopyOutHoldsItsSourceOnTheDeviceUntilItsWait) {
  std::vector<at::Tensor> x = Boundary();
  int64_t counted = 0;
  for (const at::Tensor& t : x) counted += t.defined() ? Counted(t.nbytes()) : 0;
  const int64_t before = Meter().Stats().live_bytes;
  Transfer out = Pool().ToHost(x);
  x.clear();
  EXPECT_EQ(Meter().Stats().live_bytes, before);  // still held by the copy
  out.done->Wait();
  EXPECT_EQ(Meter().Stats().live_bytes, before - counted)
      << "the copy should let its sources go once it is done";
}

TEST(HostPool, WithCheckOrderAResultReadBeforeItsWaitIsPoison) {
  if (!TestDevice().is_cpu()) GTEST_SKIP() << "on CUDA a copy may finish before the read";
  Pool().CheckOrder(true);
  const std::vector<at::Tensor> x = Boundary();
  Transfer out = Pool().ToHost(x);
  EXPECT_TRUE(out.tensors[0].isnan().all().item<bool>());
  EXPECT_TRUE(out.tensors[1].eq(-1).all().item<bool>());
  Transfer back = Pool().ToDevice(out.tensors, TestDevice());
  EXPECT_TRUE(back.tensors[0].isnan().all().item<bool>());
  EXPECT_TRUE(back.tensors[1].eq(-1).all().item<bool>());
  back.done->Wait();  // and the copy out before it
  ExpectEqual(out.tensors, x);
  ExpectEqual(back.tensors, x);
}

}  // namespace
}  // namespace ckpt
