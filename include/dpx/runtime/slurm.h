// What srun tells each task of a step, read in this one place for both of its readers: a
// program that srun starts (Env::read(), Note [Schedulers]) and `srun dpxrun`, one agent per
// node (docs/launcher.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dpx {

struct SlurmStep {
  std::string job_id;                  // SLURM_JOB_ID (or SLURM_JOBID); "" when unset
  int task = 0;                        // SLURM_PROCID
  int tasks = 1;                       // SLURM_STEP_NUM_TASKS, else SLURM_NTASKS
  std::optional<int> nodes;            // SLURM_STEP_NUM_NODES, else SLURM_NNODES
  std::optional<int> node;             // SLURM_NODEID
  std::optional<int> local_task;       // SLURM_LOCALID
  std::vector<int> tasks_per_node;     // SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE
  std::vector<std::string> hosts;      // the step's node list, expanded, in srun's task order
  std::optional<int> master_port;      // port_from_job_id(job id); nullopt without a job id
};

// The step this process runs in; nullopt outside one (in_slurm_step()). Malformed variables
// throw, naming the variable.
std::optional<SlurmStep> slurm_step();

// The Slurm step this process runs in (srun sets SLURM_STEP_ID and SLURM_PROCID).
bool in_slurm_step();

// The master port derived from a job id, the same on every node of the job:
// 20000 + id % 10000 (below Linux's ephemeral ports, 32768 and up).
int port_from_job_id(std::uint64_t job_id);

}  // namespace dpx
