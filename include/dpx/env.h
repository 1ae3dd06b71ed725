// Every environment variable the library reads, parsed in one place (docs/env.md).
// The launcher writes these; the library only reads them.
#pragma once

#include <optional>
#include <string>

#include "dpx/memory_policy.h"

namespace dpx {

enum class DebugLevel { kOff, kInfo, kDetail };

struct Env {
  // The launcher contract (spec/launcher.md); unset variables stay empty.
  std::optional<std::string> master_addr;  // MASTER_ADDR
  std::optional<int> master_port;          // MASTER_PORT
  std::optional<int> rank;                 // RANK
  std::optional<int> world_size;           // WORLD_SIZE
  std::optional<int> local_rank;           // LOCAL_RANK
  std::optional<int> local_world_size;     // LOCAL_WORLD_SIZE
  std::optional<int> group_rank;           // GROUP_RANK (node rank)
  int restart_count = 0;                   // TORCHELASTIC_RESTART_COUNT
  std::optional<std::string> run_id;       // TORCHELASTIC_RUN_ID
  std::optional<std::string> error_file;   // TORCHELASTIC_ERROR_FILE
  // TORCHELASTIC_USE_AGENT_STORE == "True": the launcher already serves the store at
  // MASTER_ADDR:MASTER_PORT, so rank 0 connects to it instead of starting one.
  bool use_agent_store = false;
  // GLOO_SOCKET_IFNAME: the network interface Gloo binds to (e.g. eth0).
  std::optional<std::string> gloo_socket_ifname;
  // dpxrun's worker heartbeat (dpx::Heartbeat): DPX_AGENT_STORE ("host:port" of the agent's
  // store), DPX_HEARTBEAT_KEY (this worker's key in it), DPX_HEARTBEAT_TIMEOUT (seconds after
  // which the agent treats a silent worker as hung). Unset outside dpxrun.
  std::optional<std::string> agent_store;
  std::optional<std::string> heartbeat_key;
  std::optional<double> heartbeat_timeout;

  // DPX_DEBUG, else TORCH_DISTRIBUTED_DEBUG: OFF (default), INFO or DETAIL.
  DebugLevel debug = DebugLevel::kOff;
  // DPX_BACKEND: replaces the backend "auto" (shm, gloo).
  std::optional<std::string> backend;
  // Tuning of the shm backend (docs/backends.md): bytes of one data slot (DPX_SHM_SLOT_BYTES),
  // largest all-reduce on the one-post path (DPX_SHM_SMALL_BYTES), busy-wait before sleeping
  // in microseconds (DPX_SHM_SPIN_US).
  std::optional<int> shm_slot_bytes;
  std::optional<int> shm_small_bytes;
  std::optional<int> shm_spin_us;
  // DPX_MALLOC: what the allocator does with freed memory, `retain` or `system`; unset means
  // retain (dpx::apply_memory_policy).
  std::optional<MemoryPolicy> malloc;
  // DPX_MALLOC_CACHE_MB: most MiB of freed blocks the block cache keeps; unset: a quarter of the
  // memory this process may use, shared among the host's LOCAL_WORLD_SIZE processes.
  std::optional<int> malloc_cache_mb;

  // Reads the process environment now. Malformed values throw, naming the variable.
  static Env read();

  // The value, or an error "environment variable NAME expected, but not set".
  static std::string require(const char* name);
};

}  // namespace dpx
