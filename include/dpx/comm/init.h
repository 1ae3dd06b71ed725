// Creating process groups: from the launcher's environment (env://), a tcp:// or file:// URL,
// or an explicit store.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpx/comm/process_group.h"
#include "dpx/store/store.h"
#include "dpx/runtime/process.h"

namespace dpx {

struct InitOptions {
  // "auto" (shm when every rank is on one host; hierarchical over several hosts with several
  // ranks on one; else gloo; on CUDA, nccl unless ranks share a GPU), "shm", "gloo",
  // "hierarchical", "nccl" or "mpi" (MPI_COMM_WORLD under mpirun; no store, MASTER_ADDR or
  // init_method needed unless `store` is given). DPX_BACKEND in the environment replaces "auto".
  std::string backend = "auto";
  // Where the group's tensors live: the CPU, "cuda:N", or "cuda" for GPU LOCAL_RANK (modulo
  // the GPUs present; dpx::cuda::local_device). shm and gloo stage CUDA tensors through host
  // memory (docs/backends.md). A CUDA device becomes the calling thread's current one.
  at::Device device = at::kCPU;
  // "env://" (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), "tcp://host:port?rank=R&world_size=W",
  // "file:///path?rank=R&world_size=W". Ignored when `store` is given.
  std::string init_method = "env://";
  int rank = -1;        // >= 0 overrides the init method's rank
  int world_size = -1;  // >= 1 overrides the init method's world size
  std::shared_ptr<Store> store;
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // Distinguishes several groups of one job on one store (keys are prefixed with it).
  std::string group_name = "default";
  // The process-wide choices init_process_group makes first (dpx/runtime/process.h); std::nullopt
  // leaves the process as it is.
  std::optional<ProcessOptions> process = ProcessOptions{};
};

std::shared_ptr<ProcessGroup> init_process_group(InitOptions options = {});

// The store init_process_group(options) would set its group up on (options.store, or the one
// env://, tcp:// or file:// names) and this process's rank and world size in it, without
// making a group or any process-wide choice: for callers that build several groups on one store
// (dpxrun --check's workers).
struct StoreAndRank {
  std::shared_ptr<Store> store;
  int rank = -1;
  int world_size = -1;
};
StoreAndRank rendezvous_store(const InitOptions& options);

// A group of the given backend over a store the caller made (tests, tools); "mpi" takes a null
// store too (its group is every rank of MPI_COMM_WORLD). Makes no process-wide choice: call
// init_process() first where they are wanted. A CUDA device becomes the calling thread's
// current one, as with init_process_group.
std::shared_ptr<ProcessGroup> new_process_group(const std::string& backend,
                                                std::shared_ptr<Store> store, int rank, int size,
                                                ProcessGroup::Options options = {});

// A sub-group: `members` are ranks of `world` (the store every rank shares, this process's rank
// and the world size, as rendezvous_store gives them), in group-rank order (group rank i is
// members[i]). Only the members call it, and nothing waits for the other ranks, so groups of
// different members are made at the same time. The group's keys go under a prefix named after
// the list, on world.store. For "mpi", `world` may be {}: the world is MPI_COMM_WORLD (rank and
// size from MPI; a store is optional, as above), and the members alone make it with
// MPI_Comm_create_group (Note [MPI sub-groups] in src/comm/backends/mpi/subgroup.h). A list that
// is empty, names a rank out of range or twice, or lacks this rank raises std::invalid_argument.
//   auto pair = dpx::new_process_group("mpi", {}, {0, 2});   // on ranks 0 and 2 only
std::shared_ptr<ProcessGroup> new_process_group(const std::string& backend,
                                                const StoreAndRank& world,
                                                std::vector<int> members,
                                                ProcessGroup::Options options = {});

}  // namespace dpx
