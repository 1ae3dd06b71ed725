// How a replica's tensors are tied to the original module's; shared by replicate() and
// DataParallel, which keeps its replicas between forwards (Note [Replica cache]).
#pragma once

#include <torch/torch.h>

#include <memory>

namespace dpx::detail {

enum class ParamLink {
  kDifferentiable,  // non-leaf whose gradient flows to the original (replicate())
  kLeaf,            // leaf requiring grad like the original, read by DataParallel's backward
  kDetached,        // plain values, no grad (replicate(detach=true))
};

// module.clone(device), leaving the default CPU generator's state as it was.
//
// Note [Clone keeps the generator]
// clone() calls reset(), which draws fresh initial values only to overwrite them: without restoring
// the generator, replicating a module would change the random numbers the program draws next.
std::shared_ptr<torch::nn::Module> clone_module(const torch::nn::Module& module,
                                                torch::Device device);

// True when the replica has the original's parameter and buffer names and submodule count,
// so sync_replica can pair them.
bool same_structure(const torch::nn::Module& original, const torch::nn::Module& replica);

// Points the replica's parameters and buffers at the original's current values, linked as
// `link` says, and copies the training flags. `share_buffers`: alias the buffers (replica 0
// on the module's device) rather than copy them.
void sync_replica(torch::nn::Module& original, torch::nn::Module& replica, torch::Device device,
                  bool share_buffers, ParamLink link);

}  // namespace dpx::detail

namespace dpx::detail {

// The device of the module's first parameter, else of its first buffer, else `fallback`.
torch::Device module_device(const torch::nn::Module& module, torch::Device fallback);

}  // namespace dpx::detail
