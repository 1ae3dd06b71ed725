// The key of torch::optim::Optimizer::state() across LibTorch versions: the address of the
// parameter's TensorImpl written as text in 1.x, the address itself in 2.x. The type is read off
// LibTorch's own declaration rather than a version number.
#pragma once

#include <torch/optim/optimizer.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace dpx::compat {

using OptimizerStateMap =
    std::remove_reference_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
using OptimizerStateKey = typename OptimizerStateMap::key_type;

// The key under which an optimizer keeps the state of `param`.
// (A template, so that only the branch of this LibTorch is compiled.)
template <class Key = OptimizerStateKey>
Key optimizer_state_key(const at::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;  // what LibTorch 1.x writes: operator<< of the pointer
    key << param.unsafeGetTensorImpl();
    return key.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

}  // namespace dpx::compat
