// The elastic agent: rendezvous, start the local workers, watch them, and on failure stop them
// all and start a new round while restarts remain (spec/launcher.md, docs/launcher.md).
//
// One attempt:
//   1. Join the next rendezvous round; learn group rank, global ranks, MASTER_ADDR/PORT.
//   2. Start nproc workers with the full environment; pump their output.
//   3. Every --monitor-interval: reap workers, check heartbeats, poll the rendezvous.
//   4. All succeeded: exit barrier, exit 0. One failed: stop all (SIGTERM, SIGKILL after the
//      grace period), then restart (1.) if restarts remain, else print the summary, exit 1.
//      A new node waiting or another node restarting: stop all, go to 1. (not counted).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dpx/ft/coordinator.h"
#include "dpxrun/config.h"
#include "dpxrun/failure.h"
#include "dpxrun/liveness.h"
#include "dpxrun/logs.h"
#include "dpxrun/rendezvous.h"
#include "dpxrun/workers.h"

namespace dpxrun {

// Signal handling of the agent process: SIGINT/SIGTERM/SIGHUP/SIGQUIT are recorded (and wake
// the monitor loop) so they can be forwarded to the workers.
void install_signal_handlers();
int pending_signal();

class Agent {
 public:
  explicit Agent(Config config);
  ~Agent();
  int run();  // the process exit code

 private:
  int run_rounds();
  // --fault-tolerant: this node is one replica group, restarted alone (agent_ft.cpp).
  int run_fault_tolerant();
  int finish_fault_tolerant(int code);
  enum class Outcome { kSucceeded, kFailed, kRestart, kMembershipChange, kJobFailed, kSignal };

  void make_log_dir();
  void start_workers(const RoundInfo& round);
  std::vector<std::string> worker_env(const RoundInfo& round, int local_rank) const;
  Outcome monitor(const RoundInfo& round);
  bool check_heartbeats(const RoundInfo& round);
  void stop(int sig);
  int finish_failed(const std::string& why);
  // Restart (-1) or the exit code, after this node's workers failed and were stopped.
  int after_failure(const RoundInfo& round);
  // The other members of `round` that stopped answering, one line each (Note [Lost nodes]).
  void say_lost_nodes(const RoundInfo& round);

  Config config_;
  std::string host_;
  std::string program_;
  std::string base_log_dir_;
  bool temp_log_dir_ = false;  // made by us (no --log-dir): removed when the job succeeds
  bool succeeded_ = false;
  std::string run_log_dir_;
  std::unique_ptr<Rendezvous> rdzv_;
  std::unique_ptr<Liveness> liveness_;  // with several nodes (Note [Lost nodes])
  RoundInfo round_;                      // the last round joined
  std::unique_ptr<dpx::ft::Coordinator> coordinator_;  // --fault-tolerant, on the store's host
  std::unique_ptr<dpx::ft::GroupBeat> group_beat_;     // --fault-tolerant
  std::vector<Worker> workers_;
  LogPump pump_;
  std::vector<Failure> failures_;
  struct Beat {
    std::string value;
    double changed_at = 0;
  };
  std::map<int, Beat> beats_;
  double last_beat_check_ = 0;
};

}  // namespace dpxrun
