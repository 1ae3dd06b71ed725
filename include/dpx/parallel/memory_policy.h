// What the process's allocator does with memory a training step frees (Note [Retained memory]
// in src/parallel/memory_policy.cpp). DistributedDataParallel and DataParallel apply the policy
// named by DPX_MALLOC when they are constructed; other programs may apply one themselves.
#pragma once

#include <optional>

namespace dpx {

enum class MemoryPolicy {
  kRetain,  // freed blocks stay in the process for the next step (the default)
  kSystem,  // glibc's own behaviour, untouched: large freed blocks go back to the kernel
};

// Applies `policy`, else the one in DPX_MALLOC (`retain` or `system`; unset: retain), the first
// time it is called in this process, and returns the policy in force. Later calls change
// nothing: the allocator settings are process-wide and glibc cannot restore its dynamic defaults.
MemoryPolicy apply_memory_policy(std::optional<MemoryPolicy> policy = std::nullopt);

}  // namespace dpx
