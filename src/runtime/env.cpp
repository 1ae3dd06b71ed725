#include "dpx/runtime/env.h"

#include <c10/util/Exception.h>

#include "runtime/compat/torch_version.h"
#include "runtime/env_read.h"
#include "runtime/scheduler_env.h"

namespace dpx {
namespace {

using detail::env_int;
using detail::env_string;

std::optional<int> get_int(const char* name) {
  auto v = env_int(name);
  return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
}

DebugLevel parse_debug(const std::string& name, const std::string& v) {
  if (v == "OFF") return DebugLevel::kOff;
  if (v == "INFO") return DebugLevel::kInfo;
  if (v == "DETAIL") return DebugLevel::kDetail;
  TORCH_CHECK(false, "environment variable ", name, " must be OFF, INFO or DETAIL, got '", v,
              "'");
}

// Note [Schedulers] in scheduler_env.h: srun or mpirun started this process without a launcher.
void apply_scheduler(Env& e) {
  if (e.rank || e.world_size) return;
  auto s = detail::scheduler_env();
  if (!s) return;
  e.rank = s->rank;
  e.world_size = s->world_size;
  e.local_rank = s->local_rank;
  e.local_world_size = s->local_world_size;
  e.group_rank = s->group_rank;
  if (!e.master_addr) e.master_addr = s->master_addr;
  if (!e.master_port) e.master_port = s->master_port;
}

}  // namespace

Env Env::read() {
  Env e;
  e.master_addr = env_string("MASTER_ADDR");
  e.master_port = get_int("MASTER_PORT");
  e.rank = get_int("RANK");
  e.world_size = get_int("WORLD_SIZE");
  e.local_rank = get_int("LOCAL_RANK");
  e.local_world_size = get_int("LOCAL_WORLD_SIZE");
  e.group_rank = get_int("GROUP_RANK");
  e.restart_count = get_int("TORCHELASTIC_RESTART_COUNT").value_or(0);
  e.run_id = env_string("TORCHELASTIC_RUN_ID");
  e.error_file = env_string("TORCHELASTIC_ERROR_FILE");
  e.use_agent_store = env_string("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  apply_scheduler(e);
  return e;
}

std::string Env::require(const char* name) {
  auto v = env_string(name);
  if (!v && std::string(name) == "MASTER_ADDR" && !env_string("RANK")) {
    if (auto s = detail::scheduler_env()) {  // mpirun over several hosts: nothing names rank 0's
      TORCH_CHECK(false, "environment variable MASTER_ADDR expected, but not set: ", s->name,
                  " started this job on several hosts and does not say which one runs rank 0. "
                  "Set MASTER_ADDR to that host (mpirun -x MASTER_ADDR=HOST ...), or start the "
                  "program with dpxrun.");
    }
  }
  TORCH_CHECK(v.has_value() || !env_string("SLURM_JOB_ID") || in_slurm_step(),
              "environment variable ", name, " expected, but not set: this process runs in "
              "Slurm job ", *env_string("SLURM_JOB_ID"), " but outside any srun step. Start it "
              "with srun (srun PROGRAM, or srun dpxrun ... PROGRAM).");
  TORCH_CHECK(v.has_value(), "environment variable ", name,
              " expected, but not set. Start the program with dpxrun (or torchrun), or set ",
              name, " yourself.");
  return *v;
}

DebugLevel debug_level() {
  if (auto v = env_string("DPX_DEBUG")) return parse_debug("DPX_DEBUG", *v);
  if (auto t = env_string("TORCH_DISTRIBUTED_DEBUG")) {
    return parse_debug("TORCH_DISTRIBUTED_DEBUG", *t);
  }
  return DebugLevel::kOff;
}

std::vector<std::pair<std::string, std::string>> torchrun_defaults() {
  return compat::torchrun_defaults();
}

}  // namespace dpx
