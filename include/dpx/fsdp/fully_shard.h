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
// sharded). Parameters keep their identity: between iterations each holds its local shard (rows
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
#include "dpx/fsdp/tensor_tree.h"

namespace dpx {
namespace detail {

class FsdpUnit;

// The unit fully_shard made of `module`; null when it made none.
std::shared_ptr<FsdpUnit> fsdp_unit_of(const torch::nn::Module& module);
std::shared_ptr<FsdpUnit> fully_shard_module(const std::shared_ptr<torch::nn::Module>& module,
                                             std::shared_ptr<ProcessGroup> pg,
                                             const FullyShardOptions& options);
// Around one forward of a unit: the inputs to call it with, the outputs to return.
std::vector<at::Tensor> fsdp_pre_forward(FsdpUnit& unit, std::vector<at::Tensor> inputs);
std::vector<at::Tensor> fsdp_post_forward(FsdpUnit& unit, std::vector<at::Tensor> outputs);
// The module's forward threw: its parameters go back to their shards.
void fsdp_forward_failed(FsdpUnit& unit) noexcept;

template <typename T>
decltype(auto) replace_tree_at(T&& x, const std::vector<at::Tensor>& with, std::size_t start) {
  return replace_tree(std::forward<T>(x), with, start);
}

template <typename T>
std::size_t count_tensors(const T& x) {
  std::vector<at::Tensor> tensors;
  collect_tree(x, tensors);
  return tensors.size();
}

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
    auto unit = detail::fsdp_unit_of(*this->get());
    if (!unit) return this->get()->forward(std::forward<Args>(args)...);
    std::vector<at::Tensor> inputs;
    (detail::collect_tree(args, inputs), ...);
    inputs = detail::fsdp_pre_forward(*unit, std::move(inputs));
    try {
      auto out = call(inputs, std::index_sequence_for<Args...>{}, std::forward<Args>(args)...);
      std::vector<at::Tensor> outputs;
      detail::collect_tree(out, outputs);
      outputs = detail::fsdp_post_forward(*unit, std::move(outputs));
      std::size_t next = 0;
      return decltype(out)(detail::replace_tree(std::move(out), outputs, next));
    } catch (...) {
      detail::fsdp_forward_failed(*unit);
      throw;
    }
  }

  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  // unshard(), reshard(), set_requires_gradient_sync(), no_sync(), ...
  FsdpControl fsdp() const { return FsdpControl(this->ptr()); }

 private:
  template <typename... Args, std::size_t... I>
  auto call(const std::vector<at::Tensor>& inputs, std::index_sequence<I...>, Args&&... args) {
    // Each argument's tensors start where the previous argument's end (a braced list is
    // evaluated in order; the call's arguments are not).
    const std::array<std::size_t, sizeof...(Args)> counts{detail::count_tensors(args)...};
    std::array<std::size_t, sizeof...(Args)> starts{};
    for (std::size_t i = 1; i < counts.size(); ++i) starts[i] = starts[i - 1] + counts[i - 1];
    return this->get()->forward(
        detail::replace_tree_at(std::forward<Args>(args), inputs, starts[I])...);
  }
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
