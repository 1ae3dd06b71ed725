#include "dpxrun/config.h"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "dpx/runtime/cuda.h"
#include "dpxrun/slurm_step.h"

namespace dpxrun {
namespace {

using Apply = std::function<void(Config&, const std::string&)>;

struct Flag {
  const char* name;  // canonical, underscored: the PET_ variable is PET_<NAME upper-cased>
  bool takes_value;
  Apply apply;
  const char* help;
  const char* short_name = "";  // "-r" for --redirects
};

constexpr double kMaxSeconds = 1e8;

[[noreturn]] void fail(const std::string& msg) { throw UsageError(msg); }

int to_int(const std::string& flag, const std::string& v) {
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size()) fail("--" + flag + " expects an integer, got '" + v + "'");
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
    fail("--" + flag + " expects a number of seconds from 0 to 1e8, got '" + v + "'");
  }
  return x;
}

bool to_bool(const std::string& flag, const std::string& v) {
  if (v.empty() || v == "1" || v == "true" || v == "True") return true;
  if (v == "0" || v == "false" || v == "False") return false;
  fail(flag + " expects 1/0 or true/false, got '" + v + "'");
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
    fail("--nnodes '" + v + "': need N or MIN:MAX with 0 < MIN <= MAX");
  }
}

// torchrun's local world size: cpu is the CPU count; gpu the GPUs this process sees, an error
// without any; auto the GPUs when there are some, else the CPUs. Counting GPUs needs no context
// on them (the driver's device count); the workers are new programs, so nothing is inherited.
void parse_nproc(Config& c, const std::string& v) {
  const auto cpus = [] { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); };
  if (v == "cpu") {
    c.nproc_per_node = cpus();
  } else if (v == "gpu" || v == "auto") {
    const int gpus = dpx::cuda::device_count();
    if (v == "gpu" && gpus == 0) {
      fail("--nproc-per-node gpu: CUDA is not available (no CUDA device is visible to this "
           "process, or dpx's LibTorch was built without CUDA); give a number of workers, or cpu");
    }
    c.nproc_per_node = gpus > 0 ? gpus : cpus();
  } else if (!v.empty() && std::isdigit(static_cast<unsigned char>(v[0]))) {
    c.nproc_per_node = to_int("nproc-per-node", v);
    if (c.nproc_per_node < 1) fail("--nproc-per-node must be at least 1, got " + v);
  } else {
    fail("--nproc-per-node '" + v + "': expected an integer, cpu, gpu or auto");
  }
}

StreamSelect parse_streams(const std::string& flag, const std::string& v) {
  auto one = [&](const std::string& s) {
    int x = s.size() == 1 ? s[0] - '0' : -1;
    if (x < 0 || x > 3) fail(flag + " '" + v + "': each value is 0 (none), 1 (stdout), 2 (stderr) "
                             "or 3 (both)");
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
    if (colon == std::string::npos) fail(flag + " '" + v + "': expected local_rank:value pairs");
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
  if (c.rdzv_port < 0 || c.rdzv_port > 65535) fail("--rdzv-endpoint port out of range: " + v);
}

void parse_rdzv_conf(Config& c, const std::string& v) {
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos) fail("--rdzv-conf '" + v + "': expected key=value,...");
    const std::string k = item.substr(0, eq), val = item.substr(eq + 1);
    if (k == "join_timeout" || k == "timeout") {
      c.timeouts.join = to_seconds("rdzv-conf " + k, val);
    } else if (k == "last_call_timeout") {
      c.timeouts.last_call = to_seconds("rdzv-conf " + k, val);
    } else if (k == "close_timeout") {
      c.timeouts.close = to_seconds("rdzv-conf " + k, val);
    } else {
      fail("--rdzv-conf: unknown key '" + k + "'; dpxrun knows join_timeout, last_call_timeout, "
           "close_timeout");
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
    if (c.*field < 0) fail(std::string("--") + flag + " must be >= 0");
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
  if (v != "spawn" && v != "fork" && v != "forkserver") fail("--start-method '" + v + "'");
}

void parse_rdzv_backend(Config& c, const std::string& v) {
  if (v != "static" && v != "c10d") {
    fail("--rdzv-backend '" + v + "': dpxrun supports static and c10d");
  }
  c.rdzv_backend = v;
}

void parse_monitor_interval(Config& c, const std::string& v) {
  c.monitor_interval = to_seconds("monitor-interval", v);
  if (c.monitor_interval <= 0) fail("--monitor-interval must be > 0");
}

void parse_master_port(Config& c, const std::string& v) {
  c.master_port = to_int("master-port", v);
  if (c.master_port <= 0 || c.master_port > 65535) fail("--master-port out of range: " + v);
}

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

// Help lists each flag once, dashed; the underscored spelling and PET_<NAME> are in the footer.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: dpxrun [FLAGS] PROGRAM [ARGS...]\n";
  }
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    if (is_positional) return opt->get_name(true, false);
    std::string out;
    for (const auto& s : opt->get_snames()) out += "-" + s + ", ";
    return out + "--" + opt->get_lnames().front();
  }
};

std::string random_id() {
  std::random_device rd;
  std::uniform_int_distribution<unsigned> d(0, 15);
  std::string s;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) s += '-';
    s += "0123456789abcdef"[d(rd)];
  }
  return s;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) fail("--check: cannot find dpxrun's own executable (/proc/self/exe)");
  return std::string(buf, static_cast<std::size_t>(n));
}

void finish(Config& c) {
  if (c.standalone) {
    c.rdzv_backend = "c10d";
    c.rdzv_host = "127.0.0.1";
    c.rdzv_port = 0;
    c.rdzv_id = random_id();
    c.min_nodes = c.max_nodes = 1;
  }
  if (c.is_static()) {
    if (c.min_nodes != c.max_nodes) {
      fail("--nnodes " + std::to_string(c.min_nodes) + ":" + std::to_string(c.max_nodes) +
           ": the static rendezvous needs a fixed number of nodes; use --rdzv-backend c10d");
    }
    if (c.node_rank >= c.max_nodes) {
      fail("--node-rank " + std::to_string(c.node_rank) + " is out of range for --nnodes " +
           std::to_string(c.max_nodes));
    }
    if (!c.rdzv_host.empty()) {  // torchrun: a static endpoint replaces master addr/port
      c.master_addr = c.rdzv_host;
      c.master_port = c.rdzv_port;
    }
  } else if (c.rdzv_host.empty()) {
    fail("--rdzv-backend c10d needs --rdzv-endpoint host[:port] (or use --standalone)");
  }
  if (c.check) {  // the workers are dpxrun itself (check.h); nothing to restart
    c.program = {self_path()};
    c.max_restarts = 0;
    // A check is run with every node at once: a node or store missing after a minute is a
    // finding, not something to wait the training default (600 s) for.
    c.timeouts.join = std::min(c.timeouts.join, 60.0);
  }
  if (c.fault_tolerant) {
    if (c.is_static()) {
      fail("--fault-tolerant needs --rdzv-backend c10d (or --standalone): a node that comes back "
           "joins by itself, without a node rank");
    }
    if (c.check) fail("--fault-tolerant and --check do not go together");
  }
  if (c.program.empty()) fail("no program given: dpxrun [flags] PROGRAM [ARGS...]");
}

}  // namespace

int StreamSelect::for_rank(int local_rank) const {
  if (per_rank.empty()) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? 0 : it->second;
}

Config parse_config(const std::vector<std::string>& args) {
  CLI::App app("Starts PROGRAM on every worker of a node as torchrun does; exit code 0 iff the "
               "job succeeded.",
               "dpxrun");
  app.formatter(std::make_shared<HelpFormatter>());
  app.footer("PROGRAM and its ARGS are passed on untouched. Every flag is also spelled with\n"
             "underscores (--nproc_per_node) and read from PET_<NAME> (PET_NPROC_PER_NODE=2)\n"
             "when not given. See docs/launcher.md.");
  // Note [Program arguments]
  // prefix_command() stops at the first word that is not a flag or a flag's value: that word is
  // PROGRAM, and it and everything after it are left as they are.
  app.prefix_command();
  std::map<std::string, std::string> values;
  std::vector<std::pair<const Flag*, CLI::Option*>> options;
  for (const auto& f : flags()) {
    std::string names = std::string(f.short_name) + (*f.short_name ? "," : "") + "--" +
                        dashed(f.name);
    if (dashed(f.name) != f.name) names += std::string(",--") + f.name;
    CLI::Option* o = f.takes_value ? app.add_option(names, values[f.name], f.help)
                                   : app.add_flag(names, values[f.name], f.help);
    o->envname(pet_variable(f.name))->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    if (f.takes_value) o->type_name("VALUE");
    options.emplace_back(&f, o);
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw HelpRequested(app.help());
  } catch (const CLI::ParseError& e) {
    fail(e.what());
  }
  Config c;
  c.program = app.remaining();
  if (!c.program.empty() && c.program.front() == "--") {
    c.program.erase(c.program.begin());
  } else if (!c.program.empty() && c.program.front().size() > 1 && c.program.front()[0] == '-') {
    fail("unknown flag '" + c.program.front() + "'");  // prefix_command() let it through
  }
  std::set<std::string> given;
  for (const auto& [flag, option] : options) {
    if (option->count() > 0) {
      flag->apply(c, values[flag->name]);
      given.insert(flag->name);
    }
  }
  c.notice = apply_slurm(c, given);  // Note [srun dpxrun]
  finish(c);
  return c;
}

}  // namespace dpxrun
