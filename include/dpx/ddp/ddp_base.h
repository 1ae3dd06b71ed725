// The module-type-independent part of DistributedDataParallel (see
// distributed_data_parallel.h): construction checks, the forward protocol, no_sync and join.
#pragma once

#include <torch/nn/module.h>

#include <any>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dpx/comm/process_group.h"
#include "dpx/ddp/comm_hooks.h"
#include "dpx/ddp/ddp_options.h"
#include "dpx/ddp/ddp_stats.h"

namespace dpx {
namespace detail {
class Reducer;
}

// A torch::nn::Module holding the wrapped module as its child "module", so parameters(),
// named_parameters() ("module.*" as in PyTorch), train()/eval(), zero_grad() and torch::save work
// as on any LibTorch module.
class DdpBase : public torch::nn::Module {
 public:
  // Restores gradient synchronisation when it goes out of scope (see no_sync()).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DdpBase* ddp) : ddp_(ddp), previous_(ddp->require_backward_grad_sync_) {
      ddp_->require_backward_grad_sync_ = false;
    }
    ~NoSyncGuard() { ddp_->require_backward_grad_sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DdpBase* ddp_;
    bool previous_;
  };

  DdpBase(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> pg,
          DistributedDataParallelOptions options);
  ~DdpBase();
  DdpBase(const DdpBase&) = delete;
  DdpBase& operator=(const DdpBase&) = delete;

  // Inside this scope backward passes accumulate gradients locally without communication;
  // the first backward after it synchronises the accumulated gradients.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(this); }

  // Replaces the bucket all-reduce; may be called once, before the first forward.
  void register_comm_hook(std::any state, CommHook hook);

  // Runs `loop` (this rank's training loop) and then, until every rank's loop ended, takes
  // part in the others' collectives with zero gradients, so ranks with fewer batches do not
  // hang the rest. Afterwards every rank holds the parameters of a rank that finished last.
  void join(const std::function<void()>& loop, JoinOptions options = {});

  DdpStats stats() const;

  const std::shared_ptr<ProcessGroup>& process_group() const { return pg_; }
  const DistributedDataParallelOptions& options() const { return options_; }

 protected:
  // Around the wrapped forward: pre_forward() syncs buffers and readies the reducer for a
  // backward; post_forward() finds the unused parameters among `outputs` when asked to.
  void pre_forward();
  void post_forward(const std::vector<at::Tensor>& outputs);

 private:
  bool training_forward() const;
  void sync_buffers(bool has_data);
  void shadow_until_all_joined();

  std::shared_ptr<torch::nn::Module> base_module_;
  std::shared_ptr<ProcessGroup> pg_;
  DistributedDataParallelOptions options_;
  std::vector<at::Tensor> buffers_;
  std::unique_ptr<detail::Reducer> reducer_;
  bool require_backward_grad_sync_ = true;
  bool join_active_ = false;
  JoinOptions join_options_;
  bool forward_synced_ = false;
  std::chrono::steady_clock::time_point forward_start_;
};

}  // namespace dpx
