// Options of fully_shard, with the defaults of PyTorch's FSDP2 (torch.distributed.fsdp).
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>

namespace dpx {

// Module-level mixed precision, as FSDP2's MixedPrecisionPolicy: parameters are cast when they
// are all-gathered, inputs and outputs at the unit's boundary; the sharded parameters, their
// gradients and the optimizer stay in the parameters' own dtype.
struct MixedPrecisionPolicy {
  // The dtype of the unsharded parameters: forward and backward compute in it and the
  // all-gather moves it. Unset: the parameters' own dtype.
  std::optional<at::ScalarType> param_dtype;
  // The dtype gradients are reduce-scattered in (and accumulated in while gradient sync is off).
  // Unset: the parameter's own dtype (PyTorch 2.15's rule: float32 for float32 parameters even
  // with param_dtype bfloat16).
  std::optional<at::ScalarType> reduce_dtype;
  // Floating-point outputs of the unit's forward are cast to this. Unset: left as computed.
  std::optional<at::ScalarType> output_dtype;
  // Cast the unit's floating-point input tensors to param_dtype (when it is set).
  bool cast_forward_inputs = true;
};

struct FullyShardOptions {
  // Free the unit's unsharded parameters after its forward and all-gather them again for its
  // backward (true), or keep them until backward (false: more memory, one all-gather fewer).
  // Unset: true for every unit but the root, which keeps its own since backward needs them
  // first (FSDP2's default).
  std::optional<bool> reshard_after_forward;
  MixedPrecisionPolicy mp_policy;
  // Read from the root (the module whose forward runs first), for all its units
  // (Note [Prefetch] in src/fsdp/fsdp_context.h):
  // the next unit's all-gather is issued when a unit's forward starts, in the order of the
  // previous iteration's forward. FSDP2 leaves forward prefetch to CUDA streams or explicit
  // lists; on host backends the collective thread gives the same overlap.
  bool forward_prefetch = true;
  // The next unit's all-gather is issued when a unit's backward starts (FSDP2's default).
  bool backward_prefetch = true;
};

}  // namespace dpx
