// PowerSGD gradient compression as a DDP comm hook (PyTorch's powerSGD_hook, Vogels et al.
// 2019): each gradient matrix M (n x m) of a bucket is sent as two thin factors P (n x r) and
// Q (m x r) with M ~ P Q^T, r = matrix_approximation_rank; tensors that would not shrink by
// min_compression_rate (vectors, small matrices) are all-reduced as they are.
#pragma once

#include <ATen/ATen.h>

#include <any>
#include <cstdint>
#include <map>
#include <memory>
#include <random>

#include "dpx/comm/process_group.h"
#include "dpx/ddp/comm_hooks.h"

namespace dpx::hooks {

// PyTorch's PowerSGDState, with its defaults. Register the hook with a shared pointer to one:
//   auto state = std::make_shared<PowerSGDState>(options);
//   ddp->register_comm_hook(state, powersgd_hook);
struct PowerSGDOptions {
  std::shared_ptr<ProcessGroup> process_group;  // null: the DDP module's
  int64_t matrix_approximation_rank = 1;
  int64_t start_powersgd_iter = 1000;  // plain all-reduce (averaging) before this iteration
  double min_compression_rate = 2;
  bool use_error_feedback = true;  // add what compression lost last time to this gradient
  bool warm_start = true;          // start from last iteration's Q instead of a random one
  double orthogonalization_epsilon = 0;
  uint32_t random_seed = 0;
};

class PowerSGDState {
 public:
  explicit PowerSGDState(PowerSGDOptions options = {});

  const PowerSGDOptions& options() const { return options_; }
  int64_t iter() const { return iter_; }
  // Elements that would have been sent without compression, and that were sent instead, since
  // PowerSGD started (PyTorch's total_numel_before/after_compression).
  int64_t numel_before_compression() const { return numel_before_; }
  int64_t numel_after_compression() const { return numel_after_; }

 private:
  friend std::shared_ptr<Future> powersgd_hook(std::any& state, GradBucket& bucket);
  struct BucketMemory {
    at::Tensor p, q, error;
  };
  void maybe_increase_iter(const GradBucket& bucket);
  // numpy's RandomState(seed).randint(1_000_000_000), which seeds PyTorch's random Q: the same
  // draws, so that dpx and PyTorch start from the same factors.
  uint32_t next_seed();

  PowerSGDOptions options_;
  int64_t iter_ = 0;
  int64_t numel_before_ = 0, numel_after_ = 0;
  std::map<std::size_t, BucketMemory> memory_;  // by bucket index
  std::mt19937 rng_;
};

// `state` must hold a std::shared_ptr<PowerSGDState>.
std::shared_ptr<Future> powersgd_hook(std::any& state, GradBucket& bucket);

}  // namespace dpx::hooks
