#include "dpx/env.h"

#include <c10/util/Exception.h>

#include <cstdlib>

namespace dpx {
namespace {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    return std::nullopt;
  }
  return std::string(v);
}

std::optional<int> get_int(const char* name) {
  auto v = get(name);
  if (!v) {
    return std::nullopt;
  }
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v->c_str(), &end, 10);
  TORCH_CHECK(errno == 0 && end != v->c_str() && *end == '\0' && x >= INT32_MIN && x <= INT32_MAX,
              "environment variable ", name, " must be an integer, got '", *v, "'");
  return static_cast<int>(x);
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
  e.master_addr = get("MASTER_ADDR");
  e.master_port = get_int("MASTER_PORT");
  e.rank = get_int("RANK");
  e.world_size = get_int("WORLD_SIZE");
  e.local_rank = get_int("LOCAL_RANK");
  e.local_world_size = get_int("LOCAL_WORLD_SIZE");
  e.group_rank = get_int("GROUP_RANK");
  e.restart_count = get_int("TORCHELASTIC_RESTART_COUNT").value_or(0);
  e.run_id = get("TORCHELASTIC_RUN_ID");
  e.error_file = get("TORCHELASTIC_ERROR_FILE");
  e.use_agent_store = get("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  e.gloo_socket_ifname = get("GLOO_SOCKET_IFNAME");
  if (auto v = get("DPX_DEBUG")) {
    e.debug = parse_debug("DPX_DEBUG", *v);
  } else if (auto t = get("TORCH_DISTRIBUTED_DEBUG")) {
    e.debug = parse_debug("TORCH_DISTRIBUTED_DEBUG", *t);
  }
  e.backend = get("DPX_BACKEND");
  e.shm_slot_bytes = get_int("DPX_SHM_SLOT_BYTES");
  e.shm_small_bytes = get_int("DPX_SHM_SMALL_BYTES");
  e.shm_spin_us = get_int("DPX_SHM_SPIN_US");
  if (auto m = get("DPX_MALLOC")) {
    TORCH_CHECK(*m == "retain" || *m == "system",
                "environment variable DPX_MALLOC must be retain or system, got '", *m, "'");
    e.malloc = *m == "retain" ? MemoryPolicy::kRetain : MemoryPolicy::kSystem;
  }
  e.malloc_cache_mb = get_int("DPX_MALLOC_CACHE_MB");
  TORCH_CHECK(!e.malloc_cache_mb || *e.malloc_cache_mb >= 0,
              "environment variable DPX_MALLOC_CACHE_MB must be >= 0, got ", *e.malloc_cache_mb);
  e.agent_store = get("DPX_AGENT_STORE");
  e.heartbeat_key = get("DPX_HEARTBEAT_KEY");
  if (auto h = get("DPX_HEARTBEAT_TIMEOUT")) {
    char* end = nullptr;
    double x = std::strtod(h->c_str(), &end);
    TORCH_CHECK(end != h->c_str() && *end == '\0' && x > 0,
                "environment variable DPX_HEARTBEAT_TIMEOUT must be a positive number of "
                "seconds, got '", *h, "'");
    e.heartbeat_timeout = x;
  }
  return e;
}

std::string Env::require(const char* name) {
  auto v = get(name);
  TORCH_CHECK(v.has_value(), "environment variable ", name,
              " expected, but not set. Start the program with dpxrun (or torchrun), or set ",
              name, " yourself.");
  return *v;
}

}  // namespace dpx
