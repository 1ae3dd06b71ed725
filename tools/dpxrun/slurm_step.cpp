#include "dpxrun/slurm_step.h"

#include <c10/util/Exception.h>

#include <cstdlib>

#include "dpx/runtime/slurm.h"

namespace dpxrun {
namespace {

// The step as srun describes it; a malformed variable is a usage error naming it.
dpx::SlurmStep read_step() {
  try {
    return *dpx::slurm_step();
  } catch (const c10::Error& e) {
    throw UsageError(e.what_without_backtrace());
  }
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
  if (c.standalone || !dpx::in_slurm_step()) return "";
  const dpx::SlurmStep step = read_step();
  if (!step.nodes) throw UsageError("Slurm gives no node count (SLURM_STEP_NUM_NODES, SLURM_NNODES)");
  const int nodes = *step.nodes;
  if (step.tasks != nodes) {
    throw UsageError("this Slurm step runs " + std::to_string(step.tasks) + " tasks on " +
                     std::to_string(nodes) + " nodes, but dpxrun is one agent per node: start "
                     "it with srun --ntasks-per-node=1 dpxrun ... (and --nproc-per-node for the "
                     "workers of each node)");
  }
  std::string notice = "Slurm job " + step.job_id + ":";
  if (!given.count("nnodes")) {
    c.min_nodes = c.max_nodes = nodes;
    notice += " --nnodes " + std::to_string(nodes);
  }
  if (!given.count("rdzv_id") && !step.job_id.empty()) {
    c.rdzv_id = "slurm-" + step.job_id;
    notice += " --rdzv-id " + c.rdzv_id;
  }
  if (!c.is_static() || given.count("rdzv_endpoint")) return notice;
  if (!given.count("node_rank")) {
    if (!step.node) throw UsageError("Slurm gives no node index (SLURM_NODEID)");
    c.node_rank = *step.node;
    notice += " --node-rank " + std::to_string(c.node_rank);
  }
  if (!given.count("master_addr")) {
    if (step.hosts.empty()) throw UsageError("Slurm gives no node list (SLURM_STEP_NODELIST)");
    c.master_addr = step.hosts.front();
    notice += " --master-addr " + c.master_addr;
  }
  if (!given.count("master_port")) {
    const char* port = std::getenv("MASTER_PORT");
    c.master_port = port != nullptr && *port != '\0'
                        ? int_var("MASTER_PORT", port)
                        : step.master_port.value_or(dpx::port_from_job_id(0));
    notice += " --master-port " + std::to_string(c.master_port);
  }
  return notice;
}

}  // namespace dpxrun
