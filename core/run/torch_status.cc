#include "core/run/torch_status.h"

#include <new>

#include "c10/util/Exception.h"

namespace ckpt {

absl::Status StatusFromCurrentException() {
  try {
    throw;
  } catch (const c10::OutOfMemoryError& e) {
    return absl::ResourceExhaustedError(e.what_without_backtrace());
  } catch (const c10::Error& e) {
    return absl::InternalError(e.what_without_backtrace());
  } catch (const std::bad_alloc& e) {
    return absl::ResourceExhaustedError(e.what());
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
  // Anything not derived from std::exception is not ours to swallow.
}

}  // namespace ckpt
