#include "runtime/scheduler_env.h"

#include <c10/util/Exception.h>

#include <cstdlib>

#include "runtime/env_read.h"

namespace dpx::detail {

int need(const char* name, std::int64_t min) {
  auto v = env_int(name, min);
  TORCH_CHECK(v.has_value(), "environment variable ", name, " expected, but not set");
  return static_cast<int>(*v);
}

std::optional<int> maybe(const char* name, std::int64_t min) {
  auto v = env_int(name, min);
  return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
}

// A job id as the scheduler writes it (digits), for the derived port.
std::optional<int> port_from(const char* name) {
  auto v = env_string(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const unsigned long long id = std::strtoull(v->c_str(), &end, 10);
  TORCH_CHECK(end != v->c_str() && *end == '\0', "environment variable ", name,
              " must be a job id (digits), got '", *v, "'");
  return port_from_job_id(id);
}

std::optional<std::string> first_of(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (auto v = env_string(n)) return v;
  }
  return std::nullopt;
}

namespace {

// With every rank on one host, the master is this host.
void master_when_one_host(SchedulerEnv& s) {
  if (s.local_world_size && *s.local_world_size == s.world_size) s.master_addr = "127.0.0.1";
}

// The variables an MPI launcher sets for each process. Its rank variable (and its size variable
// too where `size_detects`) being set is what says the launcher is there.
struct MpiNames {
  const char* name;
  bool size_detects;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
  const char* job_id;  // nullptr: this launcher gives none
};

const MpiNames kOpenMpi{"openmpi", false, "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid"};
// PMI (MPICH, Intel MPI, Hydra).
const MpiNames kPmi{"pmi", true, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                    "MPI_LOCALNRANKS", nullptr};

std::optional<SchedulerEnv> mpi(const MpiNames& names) {
  if (!env_string(names.rank) || (names.size_detects && !env_string(names.size))) {
    return std::nullopt;
  }
  SchedulerEnv s;
  s.name = names.name;
  s.rank = need(names.rank, 0);
  s.world_size = need(names.size, 1);
  s.local_rank = maybe(names.local_rank);
  s.local_world_size = maybe(names.local_size, 1);
  master_when_one_host(s);
  if (names.job_id) s.master_port = port_from(names.job_id);
  return s;
}

std::optional<SchedulerEnv> slurm() {
  auto step = slurm_step();
  if (!step) return std::nullopt;
  SchedulerEnv s;
  s.name = "slurm";
  s.rank = step->task;
  s.world_size = step->tasks;
  s.local_rank = step->local_task;
  s.group_rank = step->node;
  const int node = step->node.value_or(0);
  if (node < static_cast<int>(step->tasks_per_node.size())) {
    s.local_world_size = step->tasks_per_node[node];
  }
  // Rank 0 runs on the step's first node (srun places tasks in node-list order).
  if (!step->hosts.empty()) s.master_addr = step->hosts.front();
  s.master_port = step->master_port;
  return s;
}

}  // namespace

std::optional<SchedulerEnv> scheduler_env() {
  if (auto s = mpi(kOpenMpi)) return s;
  if (auto s = mpi(kPmi)) return s;
  return slurm();
}

}  // namespace dpx::detail
