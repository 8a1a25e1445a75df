#include "core/run/rng.h"

#include <algorithm>
#include <mutex>

#include "ATen/Context.h"

namespace ckpt {
namespace {

at::Tensor GetState(const c10::Device& device) {
  at::Generator gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void SetState(const c10::Device& device, const at::Tensor& state) {
  at::Generator gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace

RngState CaptureRng(const std::vector<c10::Device>& devices) {
  RngState state;
  state.cpu = GetState(c10::Device(c10::DeviceType::CPU));
  for (const c10::Device& d : devices) {
    if (d.is_cuda()) state.cuda.emplace_back(d, GetState(d));
  }
  return state;
}

void RestoreRng(const RngState& state) {
  SetState(c10::Device(c10::DeviceType::CPU), state.cpu);
  for (const auto& [device, tensor] : state.cuda) SetState(device, tensor);
}

std::vector<c10::Device> CudaDevicesOf(const std::vector<at::Tensor>& tensors) {
  std::vector<c10::Device> devices;
  for (const at::Tensor& t : tensors) {
    if (t.defined() && t.is_cuda() &&
        std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  }
  return devices;
}

}  // namespace ckpt
