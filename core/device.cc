#include "core/device.h"

#include <dlfcn.h>

#include <chrono>

#include "ATen/Parallel.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "torch/cuda.h"
#include "torch/version.h"

namespace ckpt {
namespace {

class CpuStepTimer final : public StepTimer {
 public:
  void Start() override { start_ = std::chrono::steady_clock::now(); }
  double StopMs() override {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// OpenBLAS's entry points, when the BLAS under LibTorch is OpenBLAS (looked up at run time:
// Debian's LibTorch links the generic libblas.so.3, which may be any implementation).
template <typename Fn>
Fn OpenBlasSymbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

absl::StatusOr<c10::Device> ResolveDevice(absl::string_view name) {
  const bool cuda_present = CudaBuilt() && torch::cuda::is_available();
  if (name == "cpu") return c10::Device(c10::DeviceType::CPU);
  if (name == "auto") {
    return cuda_present ? c10::Device(c10::DeviceType::CUDA, 0)
                        : c10::Device(c10::DeviceType::CPU);
  }
  int index = 0;
  absl::string_view rest = name;
  if (absl::ConsumePrefix(&rest, "cuda") &&
      (rest.empty() || (absl::ConsumePrefix(&rest, ":") && absl::SimpleAtoi(rest, &index) &&
                        index >= 0))) {
    if (!cuda_present) {
      return absl::UnavailableError(absl::StrCat(
          "device '", name, "': ",
          CudaBuilt() ? "no CUDA GPU is visible" : "this LibTorch was built without CUDA",
          "; use --device=cpu or auto"));
    }
    if (index >= static_cast<int>(torch::cuda::device_count())) {
      return absl::InvalidArgumentError(absl::StrCat("device '", name, "': only ",
                                                     torch::cuda::device_count(),
                                                     " CUDA device(s) are visible"));
    }
    return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", name, "'; accepted: auto, cpu, cuda, cuda:N"));
}

std::unique_ptr<StepTimer> MakeStepTimer(const c10::Device& device) {
  if (device.is_cuda()) return MakeCudaStepTimer();
  return std::make_unique<CpuStepTimer>();
}

void Synchronize(const c10::Device& device) {
  if (device.is_cuda()) CudaSynchronize();
}

absl::Status SetComputeThreads(int n) {
  if (n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("thread count ", n, " is not accepted; accepted: an integer >= 1"));
  }
  at::set_num_threads(n);
  if (auto set = OpenBlasSymbol<void (*)(int)>("openblas_set_num_threads")) set(n);
  return absl::OkStatus();
}

std::string DescribeRuntime() {
  std::string blas = "unknown (not OpenBLAS)";
  if (auto config = OpenBlasSymbol<char* (*)()>("openblas_get_config")) {
    blas = config();
    if (auto threads = OpenBlasSymbol<int (*)()>("openblas_get_num_threads")) {
      absl::StrAppend(&blas, ", ", threads(), " thread(s)");
    }
  }
  return absl::StrCat("LibTorch ", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".",
                      TORCH_VERSION_PATCH, "; intra-op threads ", at::get_num_threads(),
                      "; BLAS ", blas, "; CUDA ",
                      CudaBuilt() ? (torch::cuda::is_available()
                                         ? absl::StrCat("yes, ", torch::cuda::device_count(),
                                                        " device(s)")
                                         : std::string("built, no GPU visible"))
                                  : std::string("not built"));
}

}  // namespace ckpt
