// Copies of a module whose parameters are functions of the original's, as
// torch.nn.parallel.replicate: gradients reaching a replica's parameters flow into the original.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace dpx {

struct ReplicateOptions {
  // true: replicas' parameters are plain tensors with the original's values that no gradient
  // flows back from (PyTorch's detach=True; they do not require grad).
  bool detach = false;
};

// One copy of `module` per device, made with Module::clone() (so the module must be a
// torch::nn::Cloneable). On the module's own device a replica's parameters alias the original's
// storage; elsewhere they are copies. Without `detach` each one is a non-leaf whose gradient
// goes to the original parameter (summed over replicas), and when grad mode is off they do not
// require grad. Buffers are aliased by the first replica when it is on the module's device (so
// in-place updates such as BatchNorm's running statistics reach the original) and copied for
// every other replica. Training flags follow the original. Cloning leaves the global CPU random
// generator as it was, although clone() re-initialises parameters before copying them.
std::vector<std::shared_ptr<torch::nn::Module>> replicate(
    const std::shared_ptr<torch::nn::Module>& module, const std::vector<torch::Device>& devices,
    const ReplicateOptions& options = {});

template <typename ModuleType>
std::vector<std::shared_ptr<ModuleType>> replicate(const std::shared_ptr<ModuleType>& module,
                                                   const std::vector<torch::Device>& devices,
                                                   const ReplicateOptions& options = {}) {
  std::vector<std::shared_ptr<ModuleType>> typed;
  for (auto& replica :
       replicate(std::static_pointer_cast<torch::nn::Module>(module), devices, options)) {
    typed.push_back(std::dynamic_pointer_cast<ModuleType>(replica));
    TORCH_INTERNAL_ASSERT(typed.back(), "clone() returned a module of another type");
  }
  return typed;
}

template <typename ModuleType>
std::vector<std::shared_ptr<ModuleType>> replicate(const torch::nn::ModuleHolder<ModuleType>& module,
                                                   const std::vector<torch::Device>& devices,
                                                   const ReplicateOptions& options = {}) {
  return replicate(module.ptr(), devices, options);
}

}  // namespace dpx
