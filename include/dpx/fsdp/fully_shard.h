// Fully sharded data parallelism for LibTorch modules, as PyTorch's FSDP2 (fully_shard): each
// rank keeps 1/N of every parameter, gradient and optimizer state; a unit's parameters are
// all-gathered just before its forward and its backward and freed after; its gradients are
// reduce-scattered and averaged.
//
//   struct NetImpl : torch::nn::Module {           // units are members held as FSDPModule<...>
//     std::vector<dpx::FSDPModule<BlockImpl>> blocks;
//     torch::Tensor forward(torch::Tensor x) { for (auto& b : blocks) x = b(x); return x; }
//   };
//   for (auto& block : net->blocks) dpx::fully_shard(block, pg);  // the units first,
//   auto model = dpx::fully_shard(net, pg);                        // then the root
//   torch::optim::AdamW opt(model->parameters(), 1e-3);           // the local shards
//   loss_fn(model(x), y).backward();                              // gradients: averaged shards
//   opt.step();
//
// LibTorch modules have no forward hooks, so a unit's forward must be called through its
// FSDPModule handle (a torch::nn::ModuleHolder that behaves as a plain one until the module is
// sharded). A torch::nn::Sequential's handle calls the units inside it so itself
// (fsdp_sequential.h): fully_shard(m[0], pg); fully_shard(m, pg) and then model(x), as in Python. Parameters keep their identity: between iterations each holds its local shard (rows
// of dim 0), so optimizers, zero_grad() and the optimizer's state work on shards unchanged.
// What is and is not supported compared with FSDP2: docs/fsdp.md.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <array>
#include <memory>
#include <utility>
#include <vector>

#include "dpx/comm/process_group.h"
#include "dpx/fsdp/fsdp_options.h"
#include "dpx/fsdp/fsdp_sequential.h"
#include "dpx/fsdp/tensor_tree.h"

namespace dpx {
namespace detail {

class FsdpUnit;

std::shared_ptr<FsdpUnit> fully_shard_module(const std::shared_ptr<torch::nn::Module>& module,
                                             std::shared_ptr<ProcessGroup> pg,
                                             const FullyShardOptions& options);

}  // namespace detail

// Calls on a sharded module, as FSDP2's FSDPModule methods; a module fully_shard was not applied
// to is an error.
class FsdpControl {
 public:
  // Restores gradient synchronisation when it goes out of scope (see no_sync()).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(std::shared_ptr<torch::nn::Module> module);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    std::shared_ptr<torch::nn::Module> module_;
  };

  explicit FsdpControl(std::shared_ptr<torch::nn::Module> module) : module_(std::move(module)) {}

  // All-gathers this unit's parameters now (they stay unsharded until reshard() or the end of
  // the next backward).
  void unshard();
  void reshard();
  // false: backward passes keep unsharded gradients and reduce nothing; the first backward
  // with true reduce-scatters what was accumulated. recurse: the units inside too.
  void set_requires_gradient_sync(bool requires_gradient_sync, bool recurse = true);
  void set_reshard_after_forward(bool reshard_after_forward, bool recurse = true);
  // set_requires_gradient_sync(false) for this scope (DDP's no_sync).
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(module_); }
  const std::shared_ptr<ProcessGroup>& process_group() const;

 private:
  std::shared_ptr<torch::nn::Module> module_;
};

// A torch::nn::ModuleHolder whose forward() runs fully_shard's steps around the module's own
// when the module is a unit, and is the plain call otherwise. Copies share the module.
template <typename M>
class FSDPModule : public torch::nn::ModuleHolder<M> {
 public:
  using torch::nn::ModuleHolder<M>::ModuleHolder;
  // Implicit: a torch::nn::Linear is an FSDPModule<LinearImpl> (register_module returns one).
  FSDPModule(const torch::nn::ModuleHolder<M>& module)
      : torch::nn::ModuleHolder<M>(module.ptr()) {}

  template <typename... Args>
  auto forward(Args&&... args) {
    if constexpr (std::is_base_of_v<torch::nn::SequentialImpl, M>) {
      return detail::sequential_forward(*this->get(), std::forward<Args>(args)...);
    } else {
      auto unit = detail::fsdp_unit_of(*this->get());
      auto call = [this](auto&&... a) {
        return this->get()->forward(std::forward<decltype(a)>(a)...);
      };
      if (!unit) return call(std::forward<Args>(args)...);
      return detail::run_unit(*unit, call, std::forward<Args>(args)...);
    }
  }

  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  // unshard(), reshard(), set_requires_gradient_sync(), no_sync(), ...
  FsdpControl fsdp() const { return FsdpControl(this->ptr()); }
};

// Shards `module`'s parameters that no unit inside it holds yet (rows of dim 0 over the group's
// ranks, the last ranks' padded) and makes it a unit. Apply it to the units first, then to the
// root. Collective: every rank calls it for the same modules in the same order.
template <typename M>
FSDPModule<M> fully_shard(std::shared_ptr<M> module, std::shared_ptr<ProcessGroup> pg,
                          const FullyShardOptions& options = {}) {
  detail::fully_shard_module(module, std::move(pg), options);
  return FSDPModule<M>(std::move(module));
}

template <typename M>
FSDPModule<M> fully_shard(const torch::nn::ModuleHolder<M>& module,
                          std::shared_ptr<ProcessGroup> pg, const FullyShardOptions& options = {}) {
  return fully_shard(module.ptr(), std::move(pg), options);
}

// The gradients of `module`'s sharded parameters scaled so that their norm over all ranks is at
// most max_norm, as torch.nn.utils.clip_grad_norm_ does on FSDP2's sharded gradients; returns
// that total norm (before clipping). norm_type: p > 0, or infinity. Collective.
double clip_grad_norm_(const torch::nn::Module& module, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace dpx
