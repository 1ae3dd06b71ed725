// dpx::spawn: the in-program launcher, like torch.multiprocessing.spawn. Forks nprocs workers that
// run fn(rank, world_size) with the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...,
// and a store the parent serves on a free port), so init_process_group() works inside fn.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "dpx/errors.h"
#include "dpx/store/types.h"

namespace dpx {

struct SpawnOptions {
  // The whole job; when it passes, every worker is stopped and TimeoutError is thrown.
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // After one worker fails, the others get SIGTERM and this long before SIGKILL.
  std::chrono::milliseconds stop_grace = std::chrono::seconds(5);
};

// Runs fn(rank, nprocs) in nprocs forked processes and waits for all. If one throws or dies,
// the others are stopped and ProcessFailedError carries the first failure's message. Call it
// before creating threads of your own (fork copies only the calling thread).
void spawn(int nprocs, const std::function<void(int rank, int world_size)>& fn,
           SpawnOptions options = {});

}  // namespace dpx
