// The process-wide choices dpx makes for a training program, made in this one place and only
// when asked: init_process_group() calls init_process() unless told not to
// (InitOptions::process = std::nullopt); constructors of groups, stores, DDP and DataParallel
// change nothing process-wide. Programs that build groups with new_process_group() or use
// DataParallel alone call init_process() themselves if they want these choices (docs/env.md).
#pragma once

#include <optional>

#include "dpx/runtime/memory_policy.h"

namespace dpx {

struct ProcessOptions {
  // Ignore SIGPIPE, so that a write to a dead peer's socket fails with EPIPE and reaches the
  // caller as PeerLostError instead of killing this process (docs/errors.md, "SIGPIPE"). A
  // handler the program installed itself is left alone.
  bool ignore_sigpipe = true;
  // Apply a memory policy (apply_memory_policy): `memory_policy`, else the one DPX_MALLOC
  // names, retain when unset (freed CPU blocks stay cached for the next step; docs/ddp.md).
  bool apply_memory_policy = true;
  std::optional<MemoryPolicy> memory_policy;
  // Make c10d's NCCL groups (dpx's nccl backend) fail with dpx's typed errors and keep the
  // process alive: TORCH_NCCL_ASYNC_ERROR_HANDLING=2, once, in a dpx built with CUDA, unless
  // DPX_NCCL_ERROR_HANDLING=c10d leaves the variable to the program (docs/backends.md). c10d reads
  // it when a group is made, and setenv() is no call to make while other threads may read the
  // environment: hence here, before any group, store or DDP thread exists.
  bool nccl_error_handling = true;
};

// Makes the choices `options` asks for. Idempotent: each choice is made once per process and
// later calls keep it (a memory policy, once applied, stays; see apply_memory_policy).
void init_process(const ProcessOptions& options = {});

}  // namespace dpx
