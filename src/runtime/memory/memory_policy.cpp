#include "dpx/runtime/memory_policy.h"

#include <c10/util/Exception.h>

#include <mutex>

#include "runtime/env_read.h"
#include "runtime/memory/cpu_block_cache.h"

namespace dpx {
namespace {

std::mutex mutex;
std::optional<MemoryPolicy> applied;

}  // namespace

MemoryPolicy apply_memory_policy(std::optional<MemoryPolicy> policy) {
  std::lock_guard<std::mutex> lock(mutex);
  if (applied) return *applied;
  MemoryPolicy p = policy ? *policy : memory_policy_in_env();
  if (p == MemoryPolicy::kRetain && !detail::CpuBlockCache::instance().install()) {
    TORCH_WARN("dpx: another CPU allocator was registered with a higher priority, so freed "
               "tensor blocks are not cached (DPX_MALLOC=retain has no effect)");
    p = MemoryPolicy::kSystem;
  }
  applied = p;
  return p;
}

MemoryPolicy memory_policy_in_env() {
  const auto m = detail::env_string("DPX_MALLOC");
  if (!m) return MemoryPolicy::kRetain;
  TORCH_CHECK(*m == "retain" || *m == "system",
              "environment variable DPX_MALLOC must be retain or system, got '", *m, "'");
  return *m == "retain" ? MemoryPolicy::kRetain : MemoryPolicy::kSystem;
}

std::size_t release_cached_memory() {
  std::lock_guard<std::mutex> lock(mutex);
  if (applied != MemoryPolicy::kRetain) return 0;
  return detail::CpuBlockCache::instance().release_cached();
}

std::size_t cached_memory_bytes() {
  std::lock_guard<std::mutex> lock(mutex);
  if (applied != MemoryPolicy::kRetain) return 0;
  return detail::CpuBlockCache::instance().cached_bytes();
}

}  // namespace dpx
