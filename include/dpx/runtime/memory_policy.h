// What happens to the memory of the tensors a training step frees (docs/ddp.md, "Memory between
// steps"). init_process() (dpx/runtime/process.h), which init_process_group() calls by default,
// applies the policy DPX_MALLOC names; programs may apply one themselves.
#pragma once

#include <cstddef>
#include <optional>

namespace dpx {

enum class MemoryPolicy {
  kRetain,  // freed CPU tensor blocks stay cached in the process for the next step (the default)
  kSystem,  // LibTorch's own CPU allocator, untouched: large freed blocks go back to the kernel
};

// Applies `policy`, else the one in DPX_MALLOC (`retain` or `system`; unset: retain), the first
// time it is called in this process, and returns the policy in force. An explicit `policy` wins
// over DPX_MALLOC. Later calls change nothing: blocks already handed out by the cache must find
// it when they are freed, so it cannot be taken out again.
MemoryPolicy apply_memory_policy(std::optional<MemoryPolicy> policy = std::nullopt);

// The policy DPX_MALLOC names (unset: retain), read now; an error names a bad value.
MemoryPolicy memory_policy_in_env();

// Gives every cached free block back to malloc (and so the largest ones to the kernel), e.g.
// after an evaluation pass that used sizes training does not; returns the bytes released. 0 when
// the cache is not in force.
std::size_t release_cached_memory();

// The bytes of freed blocks the cache holds now (0 when it is not in force): the part of a
// process's resident memory that is dpx's cache (docs/performance.md, "Memory of a long run").
std::size_t cached_memory_bytes();

}  // namespace dpx
