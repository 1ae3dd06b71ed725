// The launcher contract: the environment variables dpxrun and torchrun set for every worker
// (docs/launcher.md, docs/env.md). The launcher writes them; the library only reads them.
//
// Note [Environment]
// Each subsystem reads its own variables where it is set up, so a malformed variable breaks only
// what uses it: init_process_group reads this contract, DPX_BACKEND and DPX_TIMELINE; the store
// DPX_STORE_TOKEN; the shm backend its DPX_SHM_* tuning; the gloo backend GLOO_SOCKET_IFNAME; the
// nccl backend DPX_NCCL_ERROR_HANDLING; the mpi backend DPX_MPI_BLOCKING and, on a CUDA device,
// DPX_MPI_CUDA_AWARE; every group DPX_STALL_CHECK_SECONDS; DDP's constructor DPX_DEBUG and
// DPX_STEP_REPORT_*; the memory policy DPX_MALLOC*; the heartbeat DPX_AGENT_STORE and
// DPX_HEARTBEAT_*. docs/env.md lists them all.
// Every error names the variable and the value it found.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dpx {

enum class DebugLevel { kOff, kInfo, kDetail };

struct Env {
  // Unset variables stay empty.
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

  // Reads the process environment now. Malformed values throw, naming the variable.
  static Env read();

  // The value, or an error "environment variable NAME expected, but not set".
  static std::string require(const char* name);
};

// DPX_DEBUG, else TORCH_DISTRIBUTED_DEBUG: OFF (default), INFO or DETAIL. Read now.
DebugLevel debug_level();

// What the torchrun of the PyTorch that dpx is built against gives every worker beyond the
// contract above, as (variable, value); a launcher sets each one its own environment lacks, so
// workers of dpxrun see what torchrun's would.
std::vector<std::pair<std::string, std::string>> torchrun_defaults();

}  // namespace dpx
