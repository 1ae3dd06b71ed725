#include "slurm.h"

#include <cstdlib>
#include <vector>

#include "scheduler_env.h"

namespace dpxrun {
namespace {

std::string var(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::string first_var(const char* a, const char* b) {
  const std::string v = var(a);
  return v.empty() ? var(b) : v;
}

int int_var(const std::string& name, const std::string& value) {
  try {
    std::size_t used = 0;
    const int x = std::stoi(value, &used);
    if (used == value.size() && x >= 0) return x;
  } catch (const std::exception&) {
  }
  throw UsageError("Slurm's " + name + " is not a count: '" + value + "'");
}

}  // namespace

std::string apply_slurm(Config& c, const std::set<std::string>& given) {
  if (c.standalone || !dpx::detail::in_slurm_step()) return "";
  const std::string nodes_var = var("SLURM_STEP_NUM_NODES").empty() ? "SLURM_NNODES"
                                                                     : "SLURM_STEP_NUM_NODES";
  const std::string tasks_var = var("SLURM_STEP_NUM_TASKS").empty() ? "SLURM_NTASKS"
                                                                     : "SLURM_STEP_NUM_TASKS";
  const int nodes = int_var(nodes_var, var(nodes_var.c_str()));
  const int tasks = int_var(tasks_var, var(tasks_var.c_str()));
  if (tasks != nodes) {
    throw UsageError("this Slurm step runs " + std::to_string(tasks) + " tasks on " +
                     std::to_string(nodes) + " nodes, but dpxrun is one agent per node: start "
                     "it with srun --ntasks-per-node=1 dpxrun ... (and --nproc-per-node for the "
                     "workers of each node)");
  }
  const std::string job = first_var("SLURM_JOB_ID", "SLURM_JOBID");
  std::string notice = "Slurm job " + job + ":";
  if (!given.count("nnodes")) {
    c.min_nodes = c.max_nodes = nodes;
    notice += " --nnodes " + std::to_string(nodes);
  }
  if (!given.count("rdzv_id") && !job.empty()) {
    c.rdzv_id = "slurm-" + job;
    notice += " --rdzv-id " + c.rdzv_id;
  }
  if (!c.is_static() || given.count("rdzv_endpoint")) return notice;
  if (!given.count("node_rank")) {
    c.node_rank = int_var("SLURM_NODEID", var("SLURM_NODEID"));
    notice += " --node-rank " + std::to_string(c.node_rank);
  }
  if (!given.count("master_addr")) {
    std::vector<std::string> hosts;
    try {
      hosts = dpx::detail::expand_slurm_hostlist(
          first_var("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"));
    } catch (const std::exception& e) {
      const std::string what = e.what();
      throw UsageError(what.substr(0, what.find('\n')));  // without c10's backtrace
    }
    if (hosts.empty()) throw UsageError("Slurm gives no node list (SLURM_STEP_NODELIST)");
    c.master_addr = hosts.front();
    notice += " --master-addr " + c.master_addr;
  }
  if (!given.count("master_port")) {
    const std::string port = var("MASTER_PORT");
    c.master_port = !port.empty() ? int_var("MASTER_PORT", port)
                    : dpx::detail::port_from_job_id(std::strtoull(job.c_str(), nullptr, 10));
    notice += " --master-port " + std::to_string(c.master_port);
  }
  return notice;
}

}  // namespace dpxrun
