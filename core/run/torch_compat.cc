#include "core/run/torch_compat.h"

#include "ATen/autocast_mode.h"

namespace ckpt::compat {

AutocastState GetAutocast() {
#if CKPT_TORCH_VERSION_AT_LEAST(2, 4)
  return {at::autocast::is_autocast_enabled(c10::DeviceType::CPU),
          at::autocast::get_autocast_dtype(c10::DeviceType::CPU),
          at::autocast::is_autocast_enabled(c10::DeviceType::CUDA),
          at::autocast::get_autocast_dtype(c10::DeviceType::CUDA)};
#else
  return {at::autocast::is_cpu_enabled(), at::autocast::get_autocast_cpu_dtype(),
          at::autocast::is_enabled(), at::autocast::get_autocast_gpu_dtype()};
#endif
}

void SetAutocast(const AutocastState& s) {
#if CKPT_TORCH_VERSION_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(c10::DeviceType::CPU, s.cpu);
  at::autocast::set_autocast_dtype(c10::DeviceType::CPU, s.cpu_dtype);
  at::autocast::set_autocast_enabled(c10::DeviceType::CUDA, s.cuda);
  at::autocast::set_autocast_dtype(c10::DeviceType::CUDA, s.cuda_dtype);
#else
  at::autocast::set_cpu_enabled(s.cpu);
  at::autocast::set_autocast_cpu_dtype(s.cpu_dtype);
  at::autocast::set_enabled(s.cuda);
  at::autocast::set_autocast_gpu_dtype(s.cuda_dtype);
#endif
  if (!s.cpu && !s.cuda) at::autocast::clear_cache();
}

ScopedAutocast::ScopedAutocast(const AutocastState& state)
    : saved_(GetAutocast()), saved_cache_(at::autocast::is_autocast_cache_enabled()) {
  at::autocast::set_autocast_cache_enabled(false);
  SetAutocast(state);
}

ScopedAutocast::~ScopedAutocast() {
  SetAutocast(saved_);
  at::autocast::set_autocast_cache_enabled(saved_cache_);
}

}  // namespace ckpt::compat
