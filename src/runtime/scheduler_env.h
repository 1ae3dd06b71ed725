// The launcher contract as job schedulers give it, for programs started by `srun` or `mpirun`
// without dpxrun (Note [Schedulers]).
//
// Note [Schedulers]
// Slurm's srun, OpenMPI's mpirun and PMI launchers (MPICH's Hydra, Intel MPI) tell each process who
// it is in their own variables. Env::read() falls back to them when RANK or WORLD_SIZE is unset:
// torchrun's variables win, so workers of dpxrun or torchrun started by srun read dpxrun's.
// MASTER_ADDR and MASTER_PORT, when set, win over what is derived here. An mpirun started inside a
// Slurm job starts its daemons with srun, so OpenMPI's and PMI's variables are looked at before
// Slurm's. A program run in an sbatch script itself (outside any srun step: no SLURM_STEP_ID) is
// not taken for a rank of the job.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "dpx/runtime/slurm.h"

namespace dpx::detail {

struct SchedulerEnv {
  std::string name;  // "slurm", "openmpi" or "pmi"
  int rank = 0;
  int world_size = 1;
  std::optional<int> local_rank;
  std::optional<int> local_world_size;
  std::optional<int> group_rank;           // the node's index (Slurm only)
  std::optional<std::string> master_addr;  // rank 0's host, when the scheduler tells it
  std::optional<int> master_port;          // derived from the job id
};

// What the first scheduler found in this process's environment says; nullopt outside any.
// Malformed variables throw, naming the variable.
std::optional<SchedulerEnv> scheduler_env();

// The variable readers of both the schedulers' parsers and the Slurm step's (slurm.cpp): an
// integer >= min that must be set, one that may be, a job id's derived port, the first of
// several names that is set. Malformed values throw, naming the variable.
int need(const char* name, std::int64_t min);
std::optional<int> maybe(const char* name, std::int64_t min = 0);
std::optional<int> port_from(const char* name);
std::optional<std::string> first_of(std::initializer_list<const char*> names);

// Slurm's hostlist syntax: "node[01-03,7],login" -> node01 node02 node03 node7 login; ranges
// keep their zero padding; several brackets in one name expand in order.
std::vector<std::string> expand_slurm_hostlist(const std::string& list);

// Slurm's tasks-per-node syntax: "2(x3),1" -> 2 2 2 1.
std::vector<int> expand_slurm_tasks_per_node(const std::string& list);
// (Both in slurm.cpp, beside the step they are read for.)

}  // namespace dpx::detail
