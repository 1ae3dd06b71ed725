// The backend a group gets: what was asked, or what `auto` means where the ranks are. A pure
// function, so that a machine with one host and no GPU tests every layout.
//
// Note [Backend choice]
// auto on the CPU: shm when every rank is on one host; hierarchical (shm inside each host, gloo
// between one leader per host) over several hosts when some host runs more than one rank; else
// gloo. auto on a CUDA device: nccl when dpx has it and no two ranks of a host share a GPU
// (NCCL refuses that); else shm on one host, gloo across hosts, staged through host memory.
// A backend asked for by name is kept, without looking at the placement.
#pragma once

#include <functional>

#include "comm/plan/backend.h"
#include "comm/plan/placement.h"

namespace dpx::detail {

// Never kAuto. `placement` is called only when `asked` is kAuto.
Backend choose_backend(Backend asked, bool on_device, bool nccl_built,
                       const std::function<const Placement&()>& placement);

}  // namespace dpx::detail
