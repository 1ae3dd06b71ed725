// dpxrun's flags: the table of torchrun's flags (and dpx's own) and what each does with its
// value (config.h). parse_config reads the command line against it.
#include "dpxrun/flags.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>
#include <thread>

#include "dpx/runtime/cuda.h"

namespace dpxrun {
namespace {

constexpr double kMaxSeconds = 1e8;

[[noreturn]] void bad_flag(const std::string& msg) { throw UsageError(msg); }

int to_int(const std::string& flag, const std::string& v) {
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size()) bad_flag("--" + flag + " expects an integer, got '" + v + "'");
  return x;
}

double to_seconds(const std::string& flag, const std::string& v) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  // Note [Finite durations]
  // nan compares false with everything, so a plain `x < 0` check lets it through, and the agent's
  // waits then never end; inf and huge values overflow the clock arithmetic of a deadline. A bound
  // of 1e8 s (three years) leaves every deadline finite.
  if (used == 0 || used != v.size() || !std::isfinite(x) || x < 0 || x > kMaxSeconds) {
    bad_flag("--" + flag + " expects a number of seconds from 0 to 1e8, got '" + v + "'");
  }
  return x;
}

bool to_bool(const std::string& flag, const std::string& v) {
  if (v.empty() || v == "1" || v == "true" || v == "True") return true;
  if (v == "0" || v == "false" || v == "False") return false;
  bad_flag(flag + " expects 1/0 or true/false, got '" + v + "'");
}

void parse_nnodes(Config& c, const std::string& v) {
  auto colon = v.find(':');
  if (colon == std::string::npos) {
    c.min_nodes = c.max_nodes = to_int("nnodes", v);
  } else {
    c.min_nodes = to_int("nnodes", v.substr(0, colon));
    c.max_nodes = to_int("nnodes", v.substr(colon + 1));
  }
  if (c.min_nodes <= 0 || c.max_nodes < c.min_nodes) {
    bad_flag("--nnodes '" + v + "': need N or MIN:MAX with 0 < MIN <= MAX");
  }
}

// torchrun's local world size: cpu is the CPU count; gpu the GPUs this process sees, an error
// without any; auto the GPUs when there are some, else the CPUs. Counting GPUs needs no context
// on them (the driver's device count); the workers are new programs, so nothing is inherited.
void parse_nproc(Config& c, const std::string& v) {
  const auto cpus = [] {
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  };
  if (v == "cpu") {
    c.nproc_per_node = cpus();
  } else if (v == "gpu" || v == "auto") {
    const int gpus = dpx::cuda::device_count();
    if (v == "gpu" && gpus == 0) {
      bad_flag("--nproc-per-node gpu: CUDA is not available (no CUDA device is visible to this "
               "process, or dpx's LibTorch was built without CUDA); give a number of workers, or "
               "cpu");
    }
    c.nproc_per_node = gpus > 0 ? gpus : cpus();
  } else if (!v.empty() && std::isdigit(static_cast<unsigned char>(v[0]))) {
    c.nproc_per_node = to_int("nproc-per-node", v);
    if (c.nproc_per_node < 1) bad_flag("--nproc-per-node must be at least 1, got " + v);
  } else {
    bad_flag("--nproc-per-node '" + v + "': expected an integer, cpu, gpu or auto");
  }
}

StreamSelect parse_streams(const std::string& flag, const std::string& v) {
  auto one = [&](const std::string& s) {
    int x = s.size() == 1 ? s[0] - '0' : -1;
    if (x < 0 || x > 3) {
      bad_flag(flag + " '" + v + "': each value is 0 (none), 1 (stdout), 2 (stderr) or 3 "
               "(both)");
    }
    return x;
  };
  StreamSelect sel;
  if (v.find(':') == std::string::npos) {
    sel.all = one(v);
    return sel;
  }
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos) {
      bad_flag(flag + " '" + v + "': expected local_rank:value pairs");
    }
    sel.per_rank[to_int(flag, item.substr(0, colon))] = one(item.substr(colon + 1));
  }
  return sel;
}

void parse_endpoint(Config& c, const std::string& v) {
  if (v.empty()) return;
  auto colon = v.rfind(':');
  if (colon == std::string::npos || v.front() == '[') {
    c.rdzv_host = v;
    return;
  }
  c.rdzv_host = v.substr(0, colon);
  c.rdzv_port = to_int("rdzv-endpoint", v.substr(colon + 1));
  if (c.rdzv_port < 0 || c.rdzv_port > 65535) bad_flag("--rdzv-endpoint port out of range: " + v);
}

void parse_rdzv_conf(Config& c, const std::string& v) {
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos) bad_flag("--rdzv-conf '" + v + "': expected key=value,...");
    const std::string k = item.substr(0, eq), val = item.substr(eq + 1);
    if (k == "join_timeout" || k == "timeout") {
      c.timeouts.join = to_seconds("rdzv-conf " + k, val);
    } else if (k == "last_call_timeout") {
      c.timeouts.last_call = to_seconds("rdzv-conf " + k, val);
    } else if (k == "close_timeout") {
      c.timeouts.close = to_seconds("rdzv-conf " + k, val);
    } else {
      bad_flag("--rdzv-conf: unknown key '" + k + "'; dpxrun knows join_timeout, "
               "last_call_timeout, close_timeout");
    }
  }
}

// What most flags do with their value: keep it, or read it as a switch, a number of seconds, a
// count (an integer >= 0) or the streams of --redirects and --tee; the errors name the flag.
Apply keep(std::string Config::*field) {
  return [field](Config& c, const std::string& v) { c.*field = v; };
}

Apply as_switch(bool Config::*field, const char* flag) {
  return [field, flag](Config& c, const std::string& v) { c.*field = to_bool(flag, v); };
}

Apply as_seconds(double Config::*field, const char* flag) {
  return [field, flag](Config& c, const std::string& v) { c.*field = to_seconds(flag, v); };
}

Apply as_count(int Config::*field, const char* flag) {
  return [field, flag](Config& c, const std::string& v) {
    c.*field = to_int(flag, v);
    if (c.*field < 0) bad_flag(std::string("--") + flag + " must be >= 0");
  };
}

Apply as_streams(StreamSelect Config::*field, const char* flag) {
  return [field, flag](Config& c, const std::string& v) { c.*field = parse_streams(flag, v); };
}

// torchrun's flags that mean nothing to a C++ launcher (it always executes PROGRAM itself): a
// valid value is accepted, so that torchrun command lines work unchanged.
Apply accepted_switch(const char* flag) {
  return [flag](Config&, const std::string& v) { to_bool(flag, v); };
}

void parse_start_method(Config&, const std::string& v) {
  if (v != "spawn" && v != "fork" && v != "forkserver") bad_flag("--start-method '" + v + "'");
}

void parse_rdzv_backend(Config& c, const std::string& v) {
  if (v != "static" && v != "c10d") {
    bad_flag("--rdzv-backend '" + v + "': dpxrun supports static and c10d");
  }
  c.rdzv_backend = v;
}

void parse_monitor_interval(Config& c, const std::string& v) {
  c.monitor_interval = to_seconds("monitor-interval", v);
  if (c.monitor_interval <= 0) bad_flag("--monitor-interval must be > 0");
}

void parse_master_port(Config& c, const std::string& v) {
  c.master_port = to_int("master-port", v);
  if (c.master_port <= 0 || c.master_port > 65535) bad_flag("--master-port out of range: " + v);
}

}  // namespace

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {"nnodes", true, parse_nnodes, "N or MIN:MAX nodes (default 1)"},
      {"nproc_per_node", true, parse_nproc, "workers per node: N, cpu, gpu or auto (default 1)"},
      {"rdzv_backend", true, parse_rdzv_backend, "static (default) or c10d"},
      {"rdzv_endpoint", true, parse_endpoint, "HOST[:PORT] of the rendezvous (port 29400)"},
      {"rdzv_id", true, keep(&Config::rdzv_id), "the job's id; every node gives the same"},
      {"rdzv_conf", true, parse_rdzv_conf, "join_timeout=S,last_call_timeout=S,close_timeout=S"},
      {"standalone", false, as_switch(&Config::standalone, "--standalone"),
       "one node, a fresh rendezvous on a free port"},
      {"max_restarts", true, as_count(&Config::max_restarts, "max-restarts"),
       "restarts of the worker group before failing (default 0)"},
      {"monitor_interval", true, parse_monitor_interval,
       "seconds between checks of the workers (default 0.1)"},
      {"node_rank", true, as_count(&Config::node_rank, "node-rank"),
       "this node's rank (static rendezvous)"},
      {"master_addr", true, keep(&Config::master_addr),
       "rank 0's host (static rendezvous; default 127.0.0.1)"},
      {"master_port", true, parse_master_port, "rank 0's port (static rendezvous; default 29500)"},
      {"role", true, keep(&Config::role), "the workers' role name (default 'default')"},
      {"log_dir", true, keep(&Config::log_dir),
       "keep each worker's stdout/stderr under this directory"},
      {"redirects", true, as_streams(&Config::redirects, "--redirects"),
       "streams to the log files only: 0-3 or LOCAL_RANK:0-3,...", "-r"},
      {"tee", true, as_streams(&Config::tee, "--tee"),
       "streams to the console and the log files: 0-3 or LOCAL_RANK:0-3,...", "-t"},
      {"no_python", false, accepted_switch("--no-python"),
       "accepted for torchrun's sake: PROGRAM is always executed"},
      {"module", false, accepted_switch("--module"), "accepted for torchrun's sake", "-m"},
      {"start_method", true, parse_start_method,
       "accepted for torchrun's sake: spawn, fork or forkserver"},
      {"stop_grace", true, as_seconds(&Config::stop_grace, "stop-grace"),
       "seconds between SIGTERM and SIGKILL when stopping workers (default 30)"},
      {"heartbeat_timeout", true, as_seconds(&Config::heartbeat_timeout, "heartbeat-timeout"),
       "restart workers whose heartbeat stalls this long (default 0: off)"},
      {"check", false, as_switch(&Config::check, "--check"),
       "pre-flight check on every node instead of training: versions, backends, store and "
       "rank reachability, shared memory, interfaces; PROGRAM is optional and not started"},
      {"exit_barrier_timeout", true,
       as_seconds(&Config::exit_barrier_timeout, "exit-barrier-timeout"),
       "seconds to wait for the other nodes at the end (default 300)"},
      {"fault_tolerant", false, as_switch(&Config::fault_tolerant, "--fault-tolerant"),
       "every node is a replica group: a lost node is dropped and the others train on; a node's "
       "failed workers restart alone and heal from a peer (dpx::ft::Manager; "
       "docs/fault_tolerance.md)"},
      {"timeline", true, keep(&Config::timeline),
       "record a timeline; write the ranks' merged Chrome trace to this file (docs/timeline.md)"},
  };
  return table;
}

std::string dashed(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

std::string pet_variable(const std::string& name) {
  std::string var = "PET_" + name;
  std::transform(var.begin(), var.end(), var.begin(), ::toupper);
  return var;
}

}  // namespace dpxrun
