#include "dpx/env.h"

#include <c10/util/Exception.h>

#include "env_read.h"

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
  return e;
}

std::string Env::require(const char* name) {
  auto v = env_string(name);
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

}  // namespace dpx
