#include "core/run/device.h"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

#include "ATen/Parallel.h"
#include "ATen/ops/mm.h"
#include "ATen/ops/randn.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/run/torch_status.h"
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

// OpenBLAS's DYNAMIC_ARCH picks its kernels by the CPU's model number, and a model it does not
// know gets Prescott's SSE3 kernels, whatever the CPU can do (one core of an AVX-512 Xeon it
// did not recognise: 25 GFLOP/s on 1024-square products, 127 with SkylakeX's kernels). Said
// after the BLAS in the runtime's description, with the setting that fixes it; empty otherwise.
std::string BlasKernelWarning() {
  auto core = OpenBlasSymbol<char* (*)()>("openblas_get_corename");
  if (core == nullptr || absl::string_view(core()) != "Prescott") return "";
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("avx2")) return "";
  return absl::StrCat(
      " (its SSE3 kernels, on a CPU with ", avx512 ? "AVX-512" : "AVX2",
      " whose model it did not recognise: OPENBLAS_CORETYPE=", avx512 ? "SkylakeX" : "Haswell",
      " in the environment runs its products several times faster)");
#else
  return "";
#endif
}

}  // namespace

int VisibleGpus() {
  return CudaBuilt() && torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count())
                                                    : 0;
}

absl::StatusOr<c10::Device> ResolveDevice(absl::string_view name, int local_rank) {
  const bool cuda_present = CudaBuilt() && torch::cuda::is_available();
  // A rank's own GPU where the name gives no index.
  auto by_rank = [&] {
    return c10::Device(c10::DeviceType::CUDA,
                       static_cast<c10::DeviceIndex>(std::max(local_rank, 0) % VisibleGpus()));
  };
  if (name == "cpu") return c10::Device(c10::DeviceType::CPU);
  if (name == "auto") return cuda_present ? by_rank() : c10::Device(c10::DeviceType::CPU);
  int index = 0;
  absl::string_view rest = name;
  // cuda:N with N in decimal digits only (SimpleAtoi alone would take " 1" and "+1").
  if (absl::ConsumePrefix(&rest, "cuda") &&
      (rest.empty() || (absl::ConsumePrefix(&rest, ":") && !rest.empty() &&
                        std::all_of(rest.begin(), rest.end(), absl::ascii_isdigit) &&
                        absl::SimpleAtoi(rest, &index)))) {
    if (!cuda_present) {
      return absl::UnavailableError(absl::StrCat(
          "device '", name,
          "': ", CudaBuilt() ? "no CUDA GPU is visible" : "this LibTorch was built without CUDA",
          "; use --device=cpu or auto"));
    }
    if (name == "cuda") return by_rank();
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

double Median(std::vector<double> samples) {
  if (samples.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

void Synchronize(const c10::Device& device) {
  if (device.is_cuda()) CudaSynchronize();
}

absl::Status UseDevice(const c10::Device& device) {
  return device.is_cuda() ? CudaUseDevice(device.has_index() ? device.index() : 0)
                          : absl::OkStatus();
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(CPU_COUNT(&set), 1);
  return std::max(static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), 1);
}

absl::StatusOr<int> ParseThreadCount(absl::string_view flag, absl::string_view text,
                                     const char* env) {
  const int cores = UsableCores();
  int n = 0;
  if (text == "auto") {
    const char* asked = std::getenv(env);
    if (asked == nullptr || *asked == '\0') return cores;
    if (!absl::SimpleAtoi(asked, &n) || n < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(env, "='", asked, "' is not accepted for ", flag,
                       "=auto; accepted: an integer >= 1 (at most the ", cores,
                       " usable cores are used), or unset"));
    }
    return std::min(n, cores);
  }
  if (!absl::SimpleAtoi(text, &n) || n < 1 || n > cores) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "='", text, "' is not accepted; accepted: 1..", cores,
                     " (the cores this process may use), or auto (", cores, ")"));
  }
  return n;
}

absl::StatusOr<ComputeThreads> SetComputeThreads(const ComputeThreads& threads) {
  for (const auto& [name, n] : {std::pair<const char*, int>{"LibTorch intra-op", threads.intra_op},
                                {"BLAS", threads.blas}}) {
    if (n < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " thread count ", n, " is not accepted; accepted: an integer >= 1"));
    }
  }
  at::set_num_threads(threads.intra_op);
  ComputeThreads running{at::get_num_threads(), 0};
  auto set = OpenBlasSymbol<void (*)(int)>("openblas_set_num_threads");
  auto get = OpenBlasSymbol<int (*)()>("openblas_get_num_threads");
  if (set != nullptr && get != nullptr) {
    set(threads.blas);
    running.blas = get();
  }
  return running;
}

std::string DescribeRuntime() {
  std::string blas = "unknown (not OpenBLAS)";
  if (auto config = OpenBlasSymbol<char* (*)()>("openblas_get_config")) {
    blas = config();
    if (auto threads = OpenBlasSymbol<int (*)()>("openblas_get_num_threads")) {
      absl::StrAppend(&blas, ", ", threads(), " thread(s)");
    }
    absl::StrAppend(&blas, BlasKernelWarning());
  }
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  return absl::StrCat(
      "LibTorch ", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".", TORCH_VERSION_PATCH,
      "; intra-op threads ", at::get_num_threads(), " (OMP_WAIT_POLICY ",
      wait_policy != nullptr ? wait_policy : "unset", ")", "; BLAS ", blas, "; CUDA ",
      CudaBuilt() ? (torch::cuda::is_available()
                         ? absl::StrCat("yes, ", torch::cuda::device_count(), " device(s)")
                         : std::string("built, no GPU visible"))
                  : std::string("not built"));
}

absl::StatusOr<double> MeasureGemmGflops(const c10::Device& device, int64_t n, double min_seconds) {
  return RunTorch([&] {
    const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
    const at::Tensor a = at::randn({n, n}, options);
    const at::Tensor b = at::randn({n, n}, options);
    at::Tensor c = at::mm(a, b);  // untimed: first-use costs (page faults, library handles)
    Synchronize(device);
    std::unique_ptr<StepTimer> timer = MakeStepTimer(device);
    std::vector<double> ms;
    const auto start = std::chrono::steady_clock::now();
    while (ms.size() < 3 ||
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
               min_seconds) {
      timer->Start();
      c = at::mm(a, b);
      ms.push_back(timer->StopMs());
    }
    return 2.0 * n * n * n / (Median(ms) * 1e6);
  });
}

}  // namespace ckpt
