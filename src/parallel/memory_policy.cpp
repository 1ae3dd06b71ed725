#include "dpx/parallel/memory_policy.h"

#include <c10/util/Exception.h>
#include <malloc.h>

#include <climits>
#include <mutex>

#include "dpx/env.h"

namespace dpx {

// Note [Retained memory]
// glibc serves a block above its mmap threshold (128 KiB, raised as blocks are freed, up to
// 32 MiB) with a fresh mmap(), unmaps it when it is freed, and gives the heap's top back to the
// kernel once more than 128 KiB of it is free. A training step frees and re-allocates the same
// activations, im2col buffers and gradients every step, so every step faults those pages in again
// and the kernel zeroes each one: for the Fashion-MNIST CNN, about 12,000 page faults and 11 ms of
// system time in a 65 ms step (docs/performance.md). Turning off mmap for malloc and raising the
// trim threshold to its maximum keeps freed blocks in the heap, where the next step finds them,
// as PyTorch's caching allocators do for GPU memory and as its CPU tuning guide gets by
// preloading jemalloc. The price: the heap keeps its peak size, and memory goes back to the
// kernel only when more than 2 GiB is free at the heap's top.
namespace {

void retain() {
  const bool ok = ::mallopt(M_MMAP_MAX, 0) == 1 && ::mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  TORCH_CHECK(ok, "DPX_MALLOC=retain: mallopt() refused to change the allocator; start the "
              "program with DPX_MALLOC=system to leave it alone");
}

MemoryPolicy from_env() {
  const auto v = Env::read().malloc;
  if (!v || *v == "retain") return MemoryPolicy::kRetain;
  TORCH_CHECK(*v == "system", "environment variable DPX_MALLOC must be retain or system, got '",
              *v, "'");
  return MemoryPolicy::kSystem;
}

}  // namespace

MemoryPolicy apply_memory_policy(std::optional<MemoryPolicy> policy) {
  static std::mutex mutex;
  static std::optional<MemoryPolicy> applied;
  std::lock_guard<std::mutex> lock(mutex);
  if (applied) return *applied;
  const MemoryPolicy p = policy ? *policy : from_env();
  if (p == MemoryPolicy::kRetain) retain();
  applied = p;
  return p;
}

}  // namespace dpx
