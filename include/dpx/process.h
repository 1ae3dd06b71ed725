// The process-wide choices dpx makes for a training program, made in this one place and only
// when asked: init_process_group() calls init_process() unless told not to
// (InitOptions::process = std::nullopt); constructors of groups, stores, DDP and DataParallel
// change nothing process-wide. Programs that build groups with new_process_group() or use
// DataParallel alone call init_process() themselves if they want these choices (docs/env.md).
#pragma once

#include <optional>

#include "dpx/memory_policy.h"

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
};

// Makes the choices `options` asks for. Idempotent: each choice is made once per process and
// later calls keep it (a memory policy, once applied, stays; see apply_memory_policy).
void init_process(const ProcessOptions& options = {});

}  // namespace dpx
