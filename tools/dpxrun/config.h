// dpxrun's command line: torchrun's flags (dashed or underscored), each also readable from
// PET_<NAME>; an explicit flag wins over the variable.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace dpxrun {

// Which of a worker's streams go somewhere: bit 1 stdout, bit 2 stderr ("3" both), either for
// all local ranks or per local rank ("0:1,1:2").
struct StreamSelect {
  int all = 0;
  std::map<int, int> per_rank;
  int for_rank(int local_rank) const;
};

struct RendezvousTimeouts {
  double join = 600;       // a round must form within this
  double last_call = 30;   // after MIN nodes joined, wait this long for more
  double close = 30;       // after the round closed, members must publish themselves by then
};

struct Config {
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc_per_node = 1;
  std::string rdzv_backend = "static";
  std::string rdzv_host;  // from --rdzv-endpoint
  int rdzv_port = 29400;
  std::string rdzv_id = "none";
  RendezvousTimeouts timeouts;
  bool standalone = false;
  int max_restarts = 0;
  double monitor_interval = 0.1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string role = "default";
  std::string log_dir;
  StreamSelect redirects;
  StreamSelect tee;
  // dpx extensions (torchrun has no flags for these).
  double stop_grace = 30;          // --stop-grace: SIGTERM, then SIGKILL after this
  double heartbeat_timeout = 0;    // --heartbeat-timeout: 0 = hung workers are not detected
  double exit_barrier_timeout = 300;
  bool fault_tolerant = false;  // --fault-tolerant: nodes are replica groups (agent_ft.cpp)
  bool check = false;  // --check: a pre-flight run (check.h) instead of PROGRAM
  std::string timeline;            // --timeline FILE: the merged Chrome trace of the run
  std::string report_dir;          // set by prepare_reports(): where workers leave step reports
  std::vector<std::string> program;  // PROGRAM and its arguments
  std::string notice;  // what was derived from a Slurm step (Note [srun dpxrun]); "" if nothing

  bool is_static() const { return rdzv_backend == "static"; }
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// -h / --help: what() is the help text; print it and exit 0.
class HelpRequested : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// argv without argv[0]; env is looked up through getenv. Throws UsageError (one line, no
// newline) or HelpRequested.
Config parse_config(const std::vector<std::string>& args);

}  // namespace dpxrun
