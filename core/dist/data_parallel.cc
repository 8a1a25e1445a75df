#include "core/dist/data_parallel.h"

#include <fcntl.h>
#include <netdb.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/files.h"
#include "core/base/status_macros.h"
#include "core/run/device.h"
#include "core/run/torch_compat.h"
#include "core/run/torch_status.h"

#ifndef CKPT_HAS_NCCL
#define CKPT_HAS_NCCL 0
#endif
// ProcessGroupGloo.hpp and ProcessGroupNCCL.hpp declare their classes only under these macros,
// which LibTorch's own build defines.
#if CKPT_HAS_GLOO
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
#endif
#if CKPT_HAS_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include "torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp"
#endif
#define CKPT_HAS_C10D (CKPT_HAS_GLOO || CKPT_HAS_NCCL)
#if CKPT_HAS_C10D
#include "torch/csrc/distributed/c10d/FileStore.hpp"
#include "torch/csrc/distributed/c10d/TCPStore.hpp"
#include "torch/csrc/distributed/c10d/reducer.hpp"
#endif

namespace ckpt {
namespace {

// The environment variable `name` as an integer in [lo, hi]; nullopt when unset. `bound`, if
// given, says where the upper bound comes from.
absl::StatusOr<std::optional<int>> EnvInt(const char* name, int lo, int hi,
                                          const std::string& bound = "") {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::nullopt;
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < lo || value > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, "=", text, " is not accepted; accepted: an integer in [", lo, ", ", hi, "]", bound));
  }
  return value;
}

// Where the first lines of `a` and `b` that differ begin, for the error that says how two
// ranks' configurations differ.
std::string FirstDifference(const std::string& a, const std::string& b, int rank_a, int rank_b) {
  const std::vector<std::string> la = absl::StrSplit(a, '\n'), lb = absl::StrSplit(b, '\n');
  for (size_t i = 0; i < la.size() || i < lb.size(); ++i) {
    const std::string x = i < la.size() ? la[i] : "(nothing)";
    const std::string y = i < lb.size() ? lb[i] : "(nothing)";
    if (x != y) return absl::StrCat("rank ", rank_a, " has '", x, "', rank ", rank_b, " '", y, "'");
  }
  return "they differ";
}

}  // namespace

bool HaveDataParallel() { return CKPT_HAS_C10D; }

namespace {

// Why this build has no backend for `device`'s tensors.
std::string NoBackendReason(c10::Device device) {
  if (!HaveDataParallel()) return DataParallelUnavailableReason();
  if (device.is_cpu()) {
    return "this build has NCCL but not Gloo's headers, and NCCL reduces no host tensors";
  }
  if (device.is_cuda() && CudaBuilt()) {
    return "this build found neither NCCL's header (nccl.h) nor Gloo's";
  }
  return device.is_cuda() ? "this LibTorch has no CUDA" : "no backend reduces its tensors";
}

}  // namespace

std::string DataParallelUnavailableReason() {
  if (HaveDataParallel()) return "";
  return "this build's LibTorch has neither Gloo's headers nor NCCL's (on Debian: apt-get install "
         "libgloo-dev, then rebuild)";
}

std::vector<std::string> DataParallelBackends(c10::Device device) {
  std::vector<std::string> built;
  if (device.is_cpu() && CKPT_HAS_GLOO) built.push_back("gloo");
  if (device.is_cuda() && CudaBuilt()) {
    if (CKPT_HAS_NCCL) built.push_back("nccl");
    if (CKPT_HAS_GLOO) built.push_back("gloo");
  }
  return built;
}

absl::StatusOr<std::string> ChooseBackend(c10::Device device, absl::string_view asked) {
  const std::vector<std::string> built = DataParallelBackends(device);
  if (built.empty()) {
    std::vector<std::string> devices;  // where this build has a backend
    for (const c10::Device d : {c10::Device(c10::kCPU), c10::Device(c10::kCUDA)}) {
      if (!DataParallelBackends(d).empty()) devices.push_back(absl::StrCat("--device=", d.str()));
    }
    return absl::UnimplementedError(absl::StrCat(
        "data parallel on ", device.str(), " is not built: ", NoBackendReason(device),
        "; accepted: ", devices.empty() ? "none in this build" : absl::StrJoin(devices, ", ")));
  }
  if (asked == "auto") return built.front();
  if (std::find(built.begin(), built.end(), asked) != built.end()) return std::string(asked);
  return absl::InvalidArgumentError(
      absl::StrCat(asked.empty() ? "an empty backend name" : absl::StrCat("backend '", asked, "'"),
                   " cannot reduce ", device.str(), " tensors in this build; accepted: ", "auto, ",
                   absl::StrJoin(built, ", ")));
}

#if CKPT_HAS_C10D

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  // Where the tensors of Mean, Max and Barrier live: the host for Gloo, the rank's device for
  // NCCL.
  c10::Device control_device = c10::Device(c10::kCPU);
  // Ends a backend's own threads and communicators before the group is released, where the
  // backend has such an end (LibTorch 2.x's NCCL, which otherwise warns and aborts at exit).
  std::function<void()> shutdown;

  ~Impl() {
    if (!shutdown) return;
    try {
      shutdown();
    } catch (const std::exception&) {  // a destructor: the run's outcome is already decided
    }
  }
};

struct GradientReducer::Impl {
  std::unique_ptr<c10d::Reducer> reducer;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  std::vector<at::Tensor> state;  // broadcast from rank 0 before each step
  // Each bucket's elements and their type (its tensors are made only to be timed).
  std::vector<std::pair<int64_t, at::TensorOptions>> bucket_shapes;
};

namespace {

#if CKPT_HAS_GLOO
// A process group over `store` with one Gloo backend over the transport `device`, for host
// tensors and, with `cuda`, CUDA tensors too (LibTorch 2.x splits the group from its backends,
// one per device type; 1.13's Gloo group is the group, for every device).
c10::intrusive_ptr<c10d::ProcessGroup> MakeGlooGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
    std::shared_ptr<::gloo::transport::Device> device, std::chrono::milliseconds timeout,
    bool cuda) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(std::move(device));
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
#if CKPT_TORCH_VERSION_AT_LEAST(2, 0)
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world_size);
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
  if (cuda) group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::GLOO, gloo);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  return group;
#else
  (void)cuda;
  return gloo;
#endif
}

// Gloo over loopback for a run on one host; another host's is reached through this host's
// own name, as Gloo's default device does.
c10::intrusive_ptr<c10d::ProcessGroup> JoinGloo(const c10::intrusive_ptr<c10d::Store>& store,
                                                const Rendezvous& r, c10::Device device,
                                                std::chrono::milliseconds timeout) {
  const bool local = !r.file.empty() || r.host == "127.0.0.1" || r.host == "localhost";
  auto gloo_device = local ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                           : c10d::ProcessGroupGloo::createDefaultDevice();
  return MakeGlooGroup(store, r.rank, r.world_size, gloo_device, timeout, device.is_cuda());
}
#endif  // CKPT_HAS_GLOO

#if CKPT_HAS_NCCL
// The backend's shutdown, where this LibTorch has one.
template <typename Backend>
auto ShutdownOf(const c10::intrusive_ptr<Backend>& backend, int)
    -> decltype(backend->shutdown(), std::function<void()>()) {
  return [backend] { backend->shutdown(); };
}
template <typename Backend>
std::function<void()> ShutdownOf(const c10::intrusive_ptr<Backend>&, long) {
  return nullptr;
}

// A process group over the store with one NCCL backend, for CUDA tensors, into `impl`. Its
// communicator is made at the first collective, on the device of that collective's tensors.
void JoinNccl(ProcessGroup::Impl& impl, const Rendezvous& r, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto nccl =
      c10::make_intrusive<c10d::ProcessGroupNCCL>(impl.store, r.rank, r.world_size, options);
  impl.shutdown = ShutdownOf(nccl, 0);
#if CKPT_TORCH_VERSION_AT_LEAST(2, 0)
  impl.group = c10::make_intrusive<c10d::ProcessGroup>(impl.store, r.rank, r.world_size);
  impl.group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
  impl.group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
#else
  impl.group = nccl;
#endif
}
#endif  // CKPT_HAS_NCCL

// A c10d::Reducer with ckptlab's choices (no search for unused parameters, gradients apart
// from the buckets), whichever of its constructors this LibTorch has: up to 2.6 it takes the
// buckets' size limits; later versions drop them and add flags, which keep their defaults'
// meaning here.
template <typename R = c10d::Reducer>
std::unique_ptr<R> MakeReducer(std::vector<at::Tensor> params,
                               std::vector<std::vector<size_t>> buckets, std::vector<size_t> limits,
                               c10::intrusive_ptr<c10d::ProcessGroup> group,
                               std::vector<bool> sparse, int64_t bucket_bytes,
                               int64_t first_bucket_bytes) {
  using Names = std::unordered_map<size_t, std::string>;
  using Params = std::vector<at::Tensor>;
  using Buckets = std::vector<std::vector<size_t>>;
  using Group = c10::intrusive_ptr<c10d::ProcessGroup>;
  using Sparse = std::vector<bool>;
  if constexpr (std::is_constructible_v<R, Params, Buckets, std::vector<size_t>, Group, Sparse,
                                        int64_t, bool, bool, Names, int64_t>) {
    return std::make_unique<R>(std::move(params), std::move(buckets), std::move(limits),
                               std::move(group), std::move(sparse), bucket_bytes,
                               /*find_unused_parameters=*/false,
                               /*gradient_as_bucket_view=*/false, Names(), first_bucket_bytes);
  } else if constexpr (std::is_constructible_v<R, Params, Buckets, Group, Sparse, int64_t, bool,
                                               bool, Names, int64_t, bool, bool>) {
    return std::make_unique<R>(std::move(params), std::move(buckets), std::move(group),
                               std::move(sparse), bucket_bytes, false, false, Names(),
                               first_bucket_bytes, /*skip_all_reduce_unused_params=*/false,
                               /*use_python_reducer=*/false);
  } else {
    return std::make_unique<R>(
        std::move(params), std::move(buckets), std::move(group), std::move(sparse), bucket_bytes,
        false, false, Names(), first_bucket_bytes, /*skip_all_reduce_unused_params=*/false,
        /*use_python_reducer=*/false,
        /*bucket_bytes_cap_list=*/std::vector<int64_t>{first_bucket_bytes, bucket_bytes});
  }
}

// The TCP store's classic server, where this LibTorch can choose (2.2 and later default to a
// libuv server, which builds without libuv, as Debian's 2.6, refuse at run time).
template <typename Options>
auto UseClassicServer(Options& options, int) -> decltype(options.useLibUV = false, void()) {
  options.useLibUV = false;
}
template <typename Options>
void UseClassicServer(Options&, long) {}

// All-reduces `values` with `op` over the group, in a tensor on `device`. (NCCL's wait orders
// the current stream after the collective; the copy back to the host waits for that stream.)
std::vector<double> AllReduce(c10d::ProcessGroup& group, const std::vector<double>& values,
                              c10d::ReduceOp op, c10::Device device) {
  at::Tensor t = at::tensor(values, at::TensorOptions().dtype(at::kDouble)).to(device);
  std::vector<at::Tensor> tensors = {t};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  group.allreduce(tensors, options)->wait();
  const at::Tensor host = t.cpu();
  return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
}

// A c10d file store's file: records of a key and a value, each a 32-bit length and its bytes,
// appended under an exclusive flock. The keys c10d writes: "/" + a key of ours, "-/" + one it
// deleted, and its own bookkeeping ("refcount/", "cleanup/"). Rank 0's configuration is the
// first key of ours rank 0 writes (Join).
constexpr char kRankZeroKey[] = "/ckptlab/configuration/0";
constexpr int64_t kMostStoreBytes = int64_t{64} << 20;
constexpr uint32_t kMostStoreKeyBytes = 4096;

enum class StoreState { kNotYet, kReady };

// What the file at `path` is to a rank that joins it: not there or not written yet (kNotYet),
// rank 0's store (kReady), or anything else, which is not this run's to write to or have removed
// (InvalidArgument naming it).
absl::StatusOr<StoreState> ProbeFileStore(const std::string& path) {
  auto not_a_store = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("the file store ", path, " ", why,
                                                   "; accepted: the path rank 0 was given, where "
                                                   "rank 0 makes the store (nothing else there)"));
  };
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return StoreState::kNotYet;
    return not_a_store(absl::StrCat("cannot be examined: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return not_a_store(absl::StrCat("is ", DescribeWhatIsAt(path)));
  if (st.st_uid != ::geteuid()) return not_a_store("belongs to another user");
  if (st.st_size > kMostStoreBytes) return not_a_store("is larger than any store");
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMostStoreBytes);
  if (!text.ok()) return not_a_store(std::string(text.status().message()));
  // Records are appended whole under an exclusive lock: a read while one is written may see its
  // beginning, which is a store not yet whole, not a foreign file, when what precedes is records.
  size_t at = 0;
  bool ready = false;
  while (at < text->size()) {
    uint32_t lengths[2] = {0, 0};
    std::string key;
    for (int field = 0; field < 2; ++field) {
      if (text->size() - at < sizeof(uint32_t)) return StoreState::kNotYet;
      std::memcpy(&lengths[field], text->data() + at, sizeof(uint32_t));
      at += sizeof(uint32_t);
      if (field == 0 && (lengths[0] == 0 || lengths[0] > kMostStoreKeyBytes)) {
        return not_a_store("holds something other than a store's records");
      }
      if (text->size() - at < lengths[field]) return StoreState::kNotYet;
      if (field == 0) key = text->substr(at, lengths[0]);
      at += lengths[field];
    }
    if (!(absl::StartsWith(key, "/") || absl::StartsWith(key, "-/") ||
          absl::StartsWith(key, "refcount/") || absl::StartsWith(key, "cleanup/"))) {
      return not_a_store("holds something other than a store's records");
    }
    ready |= key == kRankZeroKey;
  }
  return ready ? StoreState::kReady : StoreState::kNotYet;
}

// The file store's file, as the file policy asks: rank 0 makes it where nothing is (a file there
// is a user's, or a store a failed run left, and neither is this run's to write or have c10d
// remove); every other rank joins only rank 0's store, waiting for it until `deadline`.
absl::Status PrepareFileStore(const Rendezvous& r, std::chrono::steady_clock::time_point deadline) {
  if (r.rank == 0) {
    const absl::Status made = CreateNewFile(r.file);
    if (made.ok()) return made;
    return absl::InvalidArgumentError(absl::StrCat(
        "rank 0 cannot make the file store: ", made.message(),
        "; accepted: a path where nothing is, in an existing folder (the store is removed when "
        "the ranks leave; one a failed run left must be removed by hand)"));
  }
  while (true) {
    ASSIGN_OR_RETURN(const StoreState state, ProbeFileStore(r.file));
    if (state == StoreState::kReady) return absl::OkStatus();
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("rank ", r.rank, " of ", r.world_size,
                                                      ": rank 0 did not make the file store ",
                                                      r.file, " within ", r.timeout_s, " s"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// MASTER_ADDR resolved, before a TCP store waits on it: InvalidArgument naming it when it cannot
// be.
absl::Status CheckHostResolves(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int error = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (error == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("MASTER_ADDR=", host, " cannot be resolved (", ::gai_strerror(error),
                   "); accepted: rank 0's host name or address, reachable from every rank"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::Join(const Rendezvous& r,
                                                                 c10::Device device,
                                                                 const std::string& configuration) {
  if (r.world_size < 1 || r.rank < 0 || r.rank >= r.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", r.rank, " of world size ", r.world_size,
                     " is not accepted; accepted: ", "world size >= 1 and 0 <= rank < world size"));
  }
  if (r.timeout_s < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout ", r.timeout_s, " s is not accepted; accepted: >= 1 s"));
  }
  if (r.file.empty() && (r.port < 1 || r.port > 65535)) {
    return absl::InvalidArgumentError(
        absl::StrCat("port ", r.port, " is not accepted; accepted: 1 to 65535"));
  }
  absl::StatusOr<std::string> backend = ChooseBackend(device, r.backend);
  if (!backend.ok()) return backend.status();
  const auto timeout = std::chrono::milliseconds(int64_t{1000} * r.timeout_s);
  const std::string where = r.file.empty() ? absl::StrCat("the TCP store at ", r.host, ":", r.port)
                                           : absl::StrCat("the file store ", r.file);
  if (r.file.empty()) {
    RETURN_IF_ERROR(CheckHostResolves(r.host));
  } else {
    RETURN_IF_ERROR(PrepareFileStore(r, std::chrono::steady_clock::now() + timeout));
  }
  auto impl = std::make_unique<Impl>();
  try {
    if (r.file.empty()) {
      c10d::TCPStoreOptions options;
      options.port = static_cast<uint16_t>(r.port);
      options.isServer = r.rank == 0;
      options.numWorkers = r.world_size;
      options.timeout = timeout;
      UseClassicServer(options, 0);
      impl->store = c10::make_intrusive<c10d::TCPStore>(r.host, options);
    } else {
      impl->store = c10::make_intrusive<c10d::FileStore>(r.file, r.world_size);
      impl->store->setTimeout(timeout);
    }
  } catch (const std::exception& e) {
    const bool serves = r.file.empty() && r.rank == 0;
    return absl::UnavailableError(absl::StrCat(
        "rank ", r.rank, serves ? " could not serve " : " could not reach ", where,
        serves ? " (MASTER_PORT; is the port in use? accepted: a free port)" : "", ": ", e.what()));
  }
  // Configurations first: ranks started differently fail here, before any group is formed.
  try {
    const std::vector<uint8_t> mine(configuration.begin(), configuration.end());
    impl->store->set(absl::StrCat("ckptlab/configuration/", r.rank), mine);
    const std::vector<uint8_t> first = impl->store->get("ckptlab/configuration/0");
    const std::string reference(first.begin(), first.end());
    for (int q = 1; q < r.world_size; ++q) {
      const std::vector<uint8_t> theirs =
          impl->store->get(absl::StrCat("ckptlab/configuration/", q));
      const std::string text(theirs.begin(), theirs.end());
      if (text != reference) {
        return absl::FailedPreconditionError(absl::StrCat(
            "rank ", q, " was started with another configuration than rank 0: ",
            FirstDifference(reference, text, 0, q), "; every rank must be started alike"));
      }
    }
  } catch (const std::exception& e) {
    return absl::DeadlineExceededError(absl::StrCat("rank ", r.rank, " of ", r.world_size,
                                                    ": not every rank arrived at ", where,
                                                    " within the timeout: ", e.what()));
  }
  try {
#if CKPT_HAS_NCCL
    if (*backend == "nccl") {
      JoinNccl(*impl, r, timeout);
      impl->control_device = device;
    }
#endif
#if CKPT_HAS_GLOO
    if (*backend == "gloo") impl->group = JoinGloo(impl->store, r, device, timeout);
#endif
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rank ", r.rank, " of ", r.world_size,
                                               " could not form the ", *backend, " group through ",
                                               where, ": ", e.what()));
  }
  return std::unique_ptr<ProcessGroup>(
      new ProcessGroup(r.rank, r.world_size, *backend, std::move(impl)));
}

absl::StatusOr<std::vector<double>> ProcessGroup::Mean(const std::vector<double>& values) {
  return RunTorch([&] {
    std::vector<double> sums =
        AllReduce(*impl_->group, values, c10d::ReduceOp::SUM, impl_->control_device);
    for (double& s : sums) s /= world_size_;
    return sums;
  });
}

absl::StatusOr<std::vector<double>> ProcessGroup::Max(const std::vector<double>& values) {
  return RunTorch(
      [&] { return AllReduce(*impl_->group, values, c10d::ReduceOp::MAX, impl_->control_device); });
}

absl::Status ProcessGroup::Barrier() {
  // An all-reduce rather than c10d's barrier, whose NCCL form guesses a device per rank.
  return RunTorch(
      [&] { AllReduce(*impl_->group, {0.0}, c10d::ReduceOp::SUM, impl_->control_device); });
}

absl::StatusOr<std::string> ProcessGroup::FromRankZero(const std::string& text) {
  const std::string key = absl::StrCat("ckptlab/from_rank_0/", shared_++);
  return RunTorch([&] {
    if (rank_ == 0) {
      impl_->store->set(key, std::vector<uint8_t>(text.begin(), text.end()));
      return text;
    }
    const std::vector<uint8_t> bytes = impl_->store->get(key);
    return std::string(bytes.begin(), bytes.end());
  });
}

namespace {

// Rank 0's values of `tensors` on every rank, in place, one broadcast each (no coalescing: a
// flattened copy would be bytes the memory model does not hold).
void BroadcastFromRankZero(c10d::ProcessGroup& group, const std::vector<at::Tensor>& tensors) {
  at::NoGradGuard no_grad;
  for (const at::Tensor& t : tensors) {
    std::vector<at::Tensor> one = {t.detach()};
    group.broadcast(one)->wait();
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<GradientReducer>> GradientReducer::Create(
    ProcessGroup& group, std::vector<at::Tensor> parameters, std::vector<at::Tensor> state,
    int64_t bucket_bytes) {
  if (bucket_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket size ", bucket_bytes, " is not accepted; accepted: >= 1 byte"));
  }
  if (parameters.empty()) return absl::InvalidArgumentError("a reducer needs parameters");
  return RunTorch([&] {
    c10::intrusive_ptr<c10d::ProcessGroup> pg = group.impl().group;
    // Every rank starts from rank 0's weights and state, as DDP's constructor makes it.
    BroadcastFromRankZero(*pg, parameters);
    BroadcastFromRankZero(*pg, state);
    const int64_t first_bucket = std::min<int64_t>(bucket_bytes, c10d::kDefaultFirstBucketBytes);
    std::vector<int64_t> backward_order;  // buckets fill from the last parameter, as DDP's
    for (int64_t i = static_cast<int64_t>(parameters.size()) - 1; i >= 0; --i) {
      backward_order.push_back(i);
    }
    const std::vector<bool> dense(parameters.size(), false);
    auto assignment = c10d::compute_bucket_assignment_by_size(
        parameters, {static_cast<size_t>(first_bucket), static_cast<size_t>(bucket_bytes)}, dense,
        backward_order);
    int64_t total = 0;
    for (const at::Tensor& p : parameters) total += static_cast<int64_t>(p.nbytes());
    auto impl = std::make_unique<Impl>();
    impl->group = pg;
    impl->state = std::move(state);
    for (const std::vector<size_t>& bucket : std::get<0>(assignment)) {
      int64_t numel = 0;
      for (const size_t i : bucket) numel += parameters[i].numel();
      impl->bucket_shapes.emplace_back(numel, parameters[bucket.front()].options());
    }
    impl->reducer = MakeReducer(parameters, std::get<0>(assignment), std::get<1>(assignment), pg,
                                dense, bucket_bytes, first_bucket);
    impl->reducer->set_static_graph();
    return std::unique_ptr<GradientReducer>(new GradientReducer(std::move(impl), total));
  });
}

void GradientReducer::BeforeStep() {
  // Python's DDP forward, in its order: buckets re-laid in the order gradients arrived (once,
  // after the first steps; a broadcast, so every rank does it at the same step), rank 0's
  // state (buffers) broadcast, the step counted (static-graph mode learns in the first), hooks
  // armed.
  impl_->reducer->rebuild_buckets();
  BroadcastFromRankZero(*impl_->group, impl_->state);
  impl_->reducer->prepare_for_forward();
  impl_->reducer->prepare_for_backward({});
}

void GradientReducer::AfterStep() {
  // The first step only counted how often backward reaches each parameter: its buckets are
  // reduced now. Later steps reduced theirs during backward.
  if (steps_ == 0) impl_->reducer->delay_all_reduce();
  ++steps_;
}

absl::StatusOr<double> GradientReducer::AllReduceAloneMs() {
  return RunTorch([&] {
    std::vector<at::Tensor> buckets;
    for (const auto& [numel, options] : impl_->bucket_shapes) {
      buckets.push_back(at::zeros({numel}, options));
    }
    // On CUDA a collective's wait only orders the stream: the clock stops when the device is
    // done.
    const c10::Device device = buckets.front().device();
    Synchronize(device);
    const auto start = std::chrono::steady_clock::now();
    for (const at::Tensor& bucket : buckets) {
      std::vector<at::Tensor> one = {bucket};
      impl_->group->allreduce(one)->wait();
    }
    Synchronize(device);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  });
}

#else  // !CKPT_HAS_C10D

struct ProcessGroup::Impl {};
struct GradientReducer::Impl {};

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::Join(const Rendezvous&, c10::Device,
                                                                 const std::string&) {
  return absl::UnimplementedError(
      absl::StrCat("data parallel is not available: ", DataParallelUnavailableReason()));
}
absl::StatusOr<std::vector<double>> ProcessGroup::Mean(const std::vector<double>& values) {
  return values;
}
absl::StatusOr<std::vector<double>> ProcessGroup::Max(const std::vector<double>& values) {
  return values;
}
absl::Status ProcessGroup::Barrier() { return absl::OkStatus(); }
absl::StatusOr<std::string> ProcessGroup::FromRankZero(const std::string& text) { return text; }
absl::StatusOr<std::unique_ptr<GradientReducer>> GradientReducer::Create(ProcessGroup&,
                                                                         std::vector<at::Tensor>,
                                                                         int64_t) {
  return absl::UnimplementedError(
      absl::StrCat("data parallel is not available: ", DataParallelUnavailableReason()));
}
void GradientReducer::BeforeStep() {}
void GradientReducer::AfterStep() {}
absl::StatusOr<double> GradientReducer::AllReduceAloneMs() { return 0.0; }

#endif  // CKPT_HAS_C10D

ProcessGroup::ProcessGroup(int rank, int world_size, std::string backend,
                           std::unique_ptr<Impl> impl)
    : rank_(rank), world_size_(world_size), backend_(std::move(backend)), impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

GradientReducer::GradientReducer(std::unique_ptr<Impl> impl, int64_t bucket_bytes)
    : impl_(std::move(impl)), bucket_bytes_(bucket_bytes) {}
GradientReducer::~GradientReducer() = default;

absl::Status RankError(const ProcessGroup& group, absl::string_view what, const absl::Status& why) {
  return absl::AbortedError(absl::StrCat("rank ", group.rank(), " of ", group.world_size(), ": ",
                                         what, why.ok() ? "" : ": ", why.message()));
}

absl::Status AgreeOnOutcome(ProcessGroup* group, const absl::Status& local) {
  if (group == nullptr) return absl::OkStatus();
  const double code = local.ok() ? 0 : local.code() == absl::StatusCode::kResourceExhausted ? 1 : 2;
  const std::string mine = local.ok() ? "ok" : std::string(local.message());
  absl::StatusOr<std::vector<double>> range = group->Max({code, -code});
  if (!range.ok()) {
    return RankError(*group, absl::StrCat("lost the other ranks (this rank's step: ", mine, ")"),
                     range.status());
  }
  if ((*range)[0] != -(*range)[1]) {
    return RankError(*group,
                     absl::StrCat("the ranks' steps ended differently (this rank's: ", mine, ")"),
                     absl::OkStatus());
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> OnEveryRank(ProcessGroup* group, bool value) {
  if (group == nullptr) return value;
  absl::StatusOr<std::vector<double>> any_not = group->Max({value ? 0.0 : 1.0});
  if (!any_not.ok()) return RankError(*group, "lost the other ranks", any_not.status());
  return (*any_not)[0] == 0;
}

absl::Status SameOnEveryRank(ProcessGroup* group, const std::string& text,
                             const std::string& what) {
  if (group == nullptr) return absl::OkStatus();
  // A 32-bit digest: exact in a double, so the ranks' largest and smallest compare exactly.
  const double digest = static_cast<double>(std::hash<std::string>()(text) & 0xffffffffu);
  absl::StatusOr<std::vector<double>> range = group->Max({digest, -digest});
  if (!range.ok()) return RankError(*group, "lost the other ranks", range.status());
  if ((*range)[0] != -(*range)[1]) {
    return RankError(*group, absl::StrCat("the ranks' ", what, " differ (this rank's: ", text, ")"),
                     absl::OkStatus());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Rendezvous>> RendezvousFromEnvironment() {
  const bool has_rank = std::getenv("RANK") != nullptr;
  const bool has_world = std::getenv("WORLD_SIZE") != nullptr;
  if (!has_rank && !has_world) return std::nullopt;
  if (has_rank != has_world) {
    return absl::InvalidArgumentError(absl::StrCat(
        has_rank ? "RANK" : "WORLD_SIZE", " is set but ", has_rank ? "WORLD_SIZE" : "RANK",
        " is not; a launcher sets both (and MASTER_ADDR, MASTER_PORT)"));
  }
  Rendezvous r;
  absl::StatusOr<std::optional<int>> world = EnvInt("WORLD_SIZE", 1, 1 << 16);
  if (!world.ok()) return world.status();
  r.world_size = **world;
  absl::StatusOr<std::optional<int>> rank = EnvInt("RANK", 0, r.world_size - 1);
  if (!rank.ok()) return rank.status();
  r.rank = **rank;
  absl::StatusOr<std::optional<int>> port = EnvInt("MASTER_PORT", 1, 65535);
  if (!port.ok()) return port.status();
  if (*port) r.port = **port;
  absl::StatusOr<std::optional<int>> local_world = EnvInt("LOCAL_WORLD_SIZE", 1, r.world_size);
  if (!local_world.ok()) return local_world.status();
  if (*local_world) r.local_world_size = **local_world;
  absl::StatusOr<std::optional<int>> local_rank =
      EnvInt("LOCAL_RANK", 0, r.local_world_size - 1,
             absl::StrCat(" (below LOCAL_WORLD_SIZE, ", r.local_world_size, ")"));
  if (!local_rank.ok()) return local_rank.status();
  if (*local_rank) r.local_rank = **local_rank;
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    r.host = addr;
  }
  if (const char* file = std::getenv("CKPT_RENDEZVOUS_FILE"); file != nullptr && *file != '\0') {
    r.file = file;
  }
  return r;
}

}  // namespace ckpt
