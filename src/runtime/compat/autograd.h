// Autograd nodes across LibTorch versions: their owning pointer was std::shared_ptr<Node> and is
// c10::intrusive_ptr<Node> in newer releases. The type is read off LibTorch's own declarations
// rather than a version number.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

namespace dpx::compat {

using NodePtr = decltype(torch::autograd::impl::grad_accumulator(
    std::declval<const torch::autograd::Variable&>()));

// A new autograd node of type T, owned the way this LibTorch owns nodes.
template <class T, class... Args>
auto make_node(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    return std::make_shared<T>(std::forward<Args>(args)...);
  } else {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  }
}

}  // namespace dpx::compat
