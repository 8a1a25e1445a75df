// Device names and thread counts as users give them (--device, CKPT_TEST_DEVICE, --threads), and
// whether this build's CUDA matches the LibTorch it loaded. Against a CUDA LibTorch (CI's trixie
// root, a GPU host) the second is the check that the build links LibTorch's CUDA library, not only
// its headers.
#include "core/run/device.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "ATen/detail/CUDAHooksInterface.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/run/torch_status.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace ckpt {
namespace {

// Without LibTorch's CUDA library loaded, the CUDA hooks are a stub that refuses this question.
TEST(CudaBuilt, MatchesTheLibTorchLoaded) {
  const bool loaded_has_cuda =
      RunTorch([] { return at::detail::getCUDAHooks().versionCUDART(); }).ok();
  EXPECT_EQ(CudaBuilt(), loaded_has_cuda)
      << "built with CKPT_HAS_CUDA=" << CudaBuilt() << ", but LibTorch's CUDA library is "
      << (loaded_has_cuda ? "" : "not ") << "loaded";
}

// The GPU index a name asks for: -1 for no index (cuda), -2 for a name that is no CUDA form.
int CudaIndex(const std::string& name) {
  if (name == "cuda") return -1;
  if (!absl::StartsWith(name, "cuda:") || name.size() == 5) return -2;
  const std::string digits = name.substr(5);
  int index = 0;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return -2;
  }
  return absl::SimpleAtoi(digits, &index) ? index : -2;
}

// Names near the accepted ones (case, separators, signs, spaces, huge indices) and any text.
rc::Gen<std::string> DeviceNames() {
  return rc::gen::oneOf(
      rc::gen::arbitrary<std::string>(),
      rc::gen::element<std::string>("cpu", "auto", "cuda", "CPU", "Cuda", "cuda:", "cuda0",
                                    "cuda:-1", "cuda:+1", "cuda: 1", "cuda:1 ", "cuda:0x1",
                                    "cuda:99999999999", "", "gpu", "cpu:0", "mps"),
      rc::gen::map(rc::gen::inRange(0, 64), [](int i) { return absl::StrCat("cuda:", i); }),
      rc::gen::map(rc::gen::arbitrary<std::string>(),
                   [](const std::string& s) { return "cuda:" + s; }));
}

// Every name resolves or is refused with its reason, whatever the GPUs: cpu is the CPU; auto the
// GPU of the rank where there is one; cuda and cuda:N a visible GPU or Unavailable (no GPU) or
// InvalidArgument (no such index); any other text InvalidArgument, naming it and what is accepted.
RC_GTEST_PROP(ResolveDevice, ResolvesTheAcceptedNamesAndRefusesTheOthers, ()) {
  const std::string name = *DeviceNames();
  const int local_rank = *rc::gen::inRange(0, 8);
  const int gpus = VisibleGpus();
  const absl::StatusOr<c10::Device> device = ResolveDevice(name, local_rank);
  const int index = CudaIndex(name);
  if (name == "cpu" || (name == "auto" && gpus == 0)) {
    RC_ASSERT(device.ok());
    RC_ASSERT(device->is_cpu());
  } else if (index == -2 && name != "auto") {
    RC_ASSERT(device.status().code() == absl::StatusCode::kInvalidArgument);
    RC_ASSERT(absl::StrContains(
        device.status().message(),
        absl::StrCat("unknown device '", name, "'; accepted: auto, cpu, cuda, cuda:N")));
  } else if (gpus == 0) {
    RC_ASSERT(device.status().code() == absl::StatusCode::kUnavailable);
    RC_ASSERT(absl::StrContains(device.status().message(),
                                absl::StrCat("device '", name, "': ",
                                             CudaBuilt() ? "no CUDA GPU is visible"
                                                         : "this LibTorch was built without CUDA",
                                             "; use --device=cpu or auto")));
  } else if (index >= gpus) {
    RC_ASSERT(device.status().code() == absl::StatusCode::kInvalidArgument);
  } else {
    RC_ASSERT(device.ok());
    RC_ASSERT(device->is_cuda());
    RC_ASSERT(device->index() == (index >= 0 ? index : local_rank % gpus));
  }
}

// A thread count: an integer in 1..UsableCores(), or auto, which takes the environment
// variable's count where set (at most the usable cores), else the usable cores. Anything else is
// refused naming the flag or the variable. The variable is this test's own, not a library's.
RC_GTEST_PROP(ParseThreadCount, TakesCountsAndAutoAndRefusesTheRest, ()) {
  constexpr char kEnv[] = "CKPT_DEVICE_TEST_THREADS";
  const int cores = UsableCores();
  const auto count_text = rc::gen::weightedOneOf<std::string>(
      {{4, rc::gen::map(rc::gen::inRange(-1, cores + 2), [](int n) { return absl::StrCat(n); })},
       {1, rc::gen::element<std::string>("", "x", "1x", " 1", "99999999999999999999")},
       {1, rc::gen::string<std::string>()}});
  const std::string flag_text = *rc::gen::arbitrary<bool>() ? "auto" : *count_text;
  const bool env_set = *rc::gen::arbitrary<bool>();
  std::string env_text = *count_text;
  env_text.erase(std::find(env_text.begin(), env_text.end(), '\0'), env_text.end());
  if (env_set) {
    RC_ASSERT(setenv(kEnv, env_text.c_str(), /*overwrite=*/1) == 0);
  } else {
    RC_ASSERT(unsetenv(kEnv) == 0);
  }
  const absl::StatusOr<int> n = ParseThreadCount("--some_threads", flag_text, kEnv);
  int given = 0;
  if (flag_text == "auto") {
    int asked = 0;
    if (!env_set || env_text.empty()) {
      RC_ASSERT(n.ok() && *n == cores);
    } else if (absl::SimpleAtoi(env_text, &asked) && asked >= 1) {
      RC_ASSERT(n.ok() && *n == std::min(asked, cores));
    } else {
      RC_ASSERT(n.status().code() == absl::StatusCode::kInvalidArgument);
      RC_ASSERT(absl::StrContains(n.status().message(),
                                  absl::StrCat(kEnv, "='", env_text,
                                               "' is not accepted for "
                                               "--some_threads=auto; accepted: an integer >= 1")));
    }
  } else if (absl::SimpleAtoi(flag_text, &given) && given >= 1 && given <= cores) {
    RC_ASSERT(n.ok() && *n == given);
  } else {
    RC_ASSERT(n.status().code() == absl::StatusCode::kInvalidArgument);
    RC_ASSERT(absl::StrContains(n.status().message(),
                                absl::StrCat("--some_threads='", flag_text, "' is not accepted; ",
                                             "accepted: 1..", cores)));
  }
}

}  // namespace
}  // namespace ckpt
