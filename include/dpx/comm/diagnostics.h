// What a group set up now in this process would do, answered by the code that sets groups up,
// so that a diagnostic (dpxrun --check, docs/launcher.md) cannot drift from init_process_group.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "dpx/store/store.h"

namespace dpx {

// Where a gloo group would listen, and why: "10.0.0.2 (eth1), the route to MASTER_ADDR
// 10.0.0.1" (Note [Listen where the master is reached]). Throws c10::Error where the gloo
// backend would refuse to start: a loopback address in a job that spans hosts.
std::string gloo_listen_address(const Store* store);

// The backend "auto" picks for a CPU group of these ranks (Note [Backend choice]): "shm" when
// they all run on one host, else "hierarchical" or "gloo"; DPX_BACKEND is not looked at. One
// round through `store`, which every rank of the group makes.
std::string auto_cpu_backend(Store& store, int rank, int size, std::chrono::milliseconds timeout);

// The bytes of one slot of the shm backend's segment: DPX_SHM_SLOT_BYTES, else its default.
// The segment holds two slots per rank of the host.
std::int64_t shm_slot_bytes();

}  // namespace dpx
