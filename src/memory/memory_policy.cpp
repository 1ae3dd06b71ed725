#include "dpx/memory_policy.h"

#include <mutex>

#include "dpx/env.h"
#include "memory/cpu_block_cache.h"

namespace dpx {

MemoryPolicy apply_memory_policy(std::optional<MemoryPolicy> policy) {
  static std::mutex mutex;
  static std::optional<MemoryPolicy> applied;
  std::lock_guard<std::mutex> lock(mutex);
  if (applied) return *applied;
  const MemoryPolicy p = policy ? *policy : Env::read().malloc.value_or(MemoryPolicy::kRetain);
  if (p == MemoryPolicy::kRetain) detail::CpuBlockCache::instance().install();
  applied = p;
  return p;
}

}  // namespace dpx
