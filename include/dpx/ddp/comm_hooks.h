// Communication hooks: replace the plain all-reduce of a gradient bucket (PyTorch's
// register_comm_hook). A hook receives the bucket and returns a future of the reduced buffer.
// Without a hook the reducer divides gradients by the world size while copying them into the
// bucket; with a hook the buffer holds the plain local sum and the hook does the averaging.
#pragma once

#include <ATen/ATen.h>

#include <any>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "dpx/comm/process_group.h"
#include "dpx/ddp/future.h"

namespace dpx {

struct GradBucket {
  std::size_t index = 0;   // buckets are handed over in index order, 0 first
  bool is_last = false;    // the last bucket of this backward
  at::Tensor buffer;       // flat, one dtype; the hook may reduce it in place
  std::vector<at::Tensor> parameters;  // the parameters whose gradients the buffer holds
  std::vector<at::Tensor> gradients;   // views of `buffer`, shaped like `parameters`
  // The DDP module's group, for hooks whose state does not name one.
  std::shared_ptr<ProcessGroup> process_group;
};

// state: whatever the hook needs (passed back on every call); may be empty.
using CommHook = std::function<std::shared_ptr<Future>(std::any& state, GradBucket& bucket)>;

namespace hooks {

// The group a built-in hook uses: a std::shared_ptr<ProcessGroup> in `state`, else the bucket's.
std::shared_ptr<ProcessGroup> group_of(const std::any& state, const GradBucket& bucket);

// Sum across ranks, divided by the group size (what DDP does without a hook).
std::shared_ptr<Future> allreduce_hook(std::any& state, GradBucket& bucket);
// Casts to float16 (divided by the group size first), all-reduces, casts back into the bucket.
std::shared_ptr<Future> fp16_compress_hook(std::any& state, GradBucket& bucket);
// The same with bfloat16: float32's range, 8 bits of mantissa.
std::shared_ptr<Future> bf16_compress_hook(std::any& state, GradBucket& bucket);

}  // namespace hooks
}  // namespace dpx
