#include "config.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

namespace dpxrun {
namespace {

struct Flag {
  const char* name;  // canonical, underscored: the PET_ variable is PET_<NAME upper-cased>
  bool takes_value;
  std::function<void(Config&, const std::string&)> apply;
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
  // Note [Finite durations]: nan compares false with everything, so a plain `x < 0` check lets
  // it through, and the agent's waits then never end; inf and huge values overflow the clock
  // arithmetic of a deadline. A bound of 1e8 s (three years) leaves every deadline finite.
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

void parse_nproc(Config& c, const std::string& v) {
  if (v == "cpu" || v == "auto") {
    c.nproc_per_node = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  } else if (v == "gpu") {
    fail("--nproc-per-node gpu: dpx runs on CPU only and this machine has no CUDA devices");
  } else if (!v.empty() && std::isdigit(static_cast<unsigned char>(v[0]))) {
    c.nproc_per_node = to_int("nproc-per-node", v);
    if (c.nproc_per_node < 1) fail("--nproc-per-node must be at least 1, got " + v);
  } else {
    fail("--nproc-per-node '" + v + "': expected an integer, cpu or auto");
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

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {"nnodes", true, parse_nnodes},
      {"nproc_per_node", true, parse_nproc},
      {"rdzv_backend", true, [](Config& c, const std::string& v) {
         if (v != "static" && v != "c10d") {
           fail("--rdzv-backend '" + v + "': dpxrun supports static and c10d");
         }
         c.rdzv_backend = v;
       }},
      {"rdzv_endpoint", true, parse_endpoint},
      {"rdzv_id", true, [](Config& c, const std::string& v) { c.rdzv_id = v; }},
      {"rdzv_conf", true, parse_rdzv_conf},
      {"standalone", false,
       [](Config& c, const std::string& v) { c.standalone = to_bool("--standalone", v); }},
      {"max_restarts", true, [](Config& c, const std::string& v) {
         c.max_restarts = to_int("max-restarts", v);
         if (c.max_restarts < 0) fail("--max-restarts must be >= 0");
       }},
      {"monitor_interval", true, [](Config& c, const std::string& v) {
         c.monitor_interval = to_seconds("monitor-interval", v);
         if (c.monitor_interval <= 0) fail("--monitor-interval must be > 0");
       }},
      {"node_rank", true, [](Config& c, const std::string& v) {
         c.node_rank = to_int("node-rank", v);
         if (c.node_rank < 0) fail("--node-rank must be >= 0");
       }},
      {"master_addr", true, [](Config& c, const std::string& v) { c.master_addr = v; }},
      {"master_port", true, [](Config& c, const std::string& v) {
         c.master_port = to_int("master-port", v);
         if (c.master_port <= 0 || c.master_port > 65535) fail("--master-port out of range: " + v);
       }},
      {"role", true, [](Config& c, const std::string& v) { c.role = v; }},
      {"log_dir", true, [](Config& c, const std::string& v) { c.log_dir = v; }},
      {"redirects", true,
       [](Config& c, const std::string& v) { c.redirects = parse_streams("--redirects", v); }},
      {"tee", true, [](Config& c, const std::string& v) { c.tee = parse_streams("--tee", v); }},
      // A C++ launcher always executes PROGRAM itself; these are accepted so that torchrun
      // command lines work unchanged.
      {"no_python", false, [](Config&, const std::string& v) { to_bool("--no-python", v); }},
      {"module", false, [](Config&, const std::string& v) { to_bool("--module", v); }},
      {"start_method", true, [](Config&, const std::string& v) {
         if (v != "spawn" && v != "fork" && v != "forkserver") fail("--start-method '" + v + "'");
       }},
      {"stop_grace", true,
       [](Config& c, const std::string& v) { c.stop_grace = to_seconds("stop-grace", v); }},
      {"heartbeat_timeout", true, [](Config& c, const std::string& v) {
         c.heartbeat_timeout = to_seconds("heartbeat-timeout", v);
       }},
      {"exit_barrier_timeout", true, [](Config& c, const std::string& v) {
         c.exit_barrier_timeout = to_seconds("exit-barrier-timeout", v);
       }},
  };
  return table;
}

const Flag* find_flag(const std::string& name) {
  for (const auto& f : flags()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

std::string canonical(const std::string& arg) {
  if (arg == "-r") return "redirects";
  if (arg == "-t") return "tee";
  if (arg == "-m") return "module";
  std::string s = arg.substr(2);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

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
  if (c.program.empty()) fail("no program given: dpxrun [flags] PROGRAM [ARGS...]");
}

}  // namespace

int StreamSelect::for_rank(int local_rank) const {
  if (per_rank.empty()) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? 0 : it->second;
}

Config parse_config(const std::vector<std::string>& args) {
  std::map<std::string, std::string> given;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-' || a == "-") break;  // PROGRAM
    if (a == "-h" || a == "--help") throw HelpRequested();
    if (a.size() > 2 && a[1] != '-' && (a[1] == 'r' || a[1] == 't')) {  // "-r3", as argparse
      given[canonical(a.substr(0, 2))] = a.substr(2);
      continue;
    }
    const bool is_short = a.size() == 2 && a[1] != '-';
    const auto eq = is_short ? std::string::npos : a.find('=');
    const std::string name = canonical(eq == std::string::npos ? a : a.substr(0, eq));
    const Flag* f = find_flag(name);
    if (f == nullptr || (is_short && a != "-r" && a != "-t" && a != "-m")) {
      fail("unknown flag '" + a + "'\n" + usage());
    }
    if (!f->takes_value) {
      given[name] = eq == std::string::npos ? "1" : a.substr(eq + 1);
    } else if (eq != std::string::npos) {
      given[name] = a.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      given[name] = args[++i];
    } else {
      fail("flag '" + a + "' needs a value");
    }
  }
  Config c;
  c.program.assign(args.begin() + static_cast<long>(std::min(i, args.size())), args.end());
  for (const auto& f : flags()) {
    auto it = given.find(f.name);
    if (it != given.end()) {
      f.apply(c, it->second);
      continue;
    }
    std::string var = "PET_" + std::string(f.name);
    std::transform(var.begin(), var.end(), var.begin(), ::toupper);
    if (const char* v = std::getenv(var.c_str())) {
      f.apply(c, v);
    }
  }
  finish(c);
  return c;
}

std::string usage() {
  return "usage: dpxrun [--nnodes N|MIN:MAX] [--nproc-per-node N|cpu|auto] [--standalone]\n"
         "              [--rdzv-backend static|c10d] [--rdzv-endpoint HOST[:PORT]] [--rdzv-id ID]\n"
         "              [--rdzv-conf join_timeout=S,last_call_timeout=S,close_timeout=S]\n"
         "              [--max-restarts N] [--monitor-interval S] [--node-rank R]\n"
         "              [--master-addr A] [--master-port P] [--role NAME] [--log-dir DIR]\n"
         "              [-r|--redirects SPEC] [-t|--tee SPEC] [--no-python] [-m]\n"
         "              [--stop-grace S] [--heartbeat-timeout S] [--exit-barrier-timeout S]\n"
         "              PROGRAM [ARGS...]\n"
         "Every flag also reads PET_<NAME> (e.g. PET_NPROC_PER_NODE=2); see docs/launcher.md.";
}

}  // namespace dpxrun
