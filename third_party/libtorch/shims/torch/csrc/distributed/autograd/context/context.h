// Stand-in for a LibTorch header that Debian's libtorch-dev 1.13 does not ship, although its
// c10d/reducer.hpp includes it: the build adds this folder to the include path only where the
// LibTorch in use lacks the header (third_party/libtorch/libtorch.bzl, CMakeLists.txt).
//
// reducer.hpp needs two names from it: the gradient callback type, which it checks against
// its own, and the pointer type of a member that holds a distributed-autograd context. ckptlab
// never creates such a context and never calls the class, so it is only declared here: no
// member of it is defined or used, and the Reducer's layout holds only pointers to it.
#pragma once

#include <functional>
#include <memory>

#include "ATen/core/Tensor.h"

namespace torch {
namespace distributed {
namespace autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};
using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace autograd
}  // namespace distributed
}  // namespace torch
