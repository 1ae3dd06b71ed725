// The rendezvous: which nodes form the group of a round, and each node's ranks in it.
// Static and c10d share one protocol over a dpx::Store; they differ in who hosts the store
// (static: node 0 at --master-addr:--master-port; c10d: the agent on the endpoint's host) and in
// how a round closes (static: exactly --nnodes nodes with their --node-rank; c10d: MAX nodes at
// once or MIN after the last call, ranks by arrival).
//
// Keys, under "dpxrun/<run_id>/":
//   state            "<round>:<restarts>", or "failed". Absent = "0:0".
//   r<R>/joined      counter; a joiner's index is the value it got minus one
//   r<R>/closed      the number of members N (set once, by compare-set); index >= N = late
//   r<R>/node<i>     "node_rank host nproc" of member i
//   r<R>/master      "addr:port" of the group's MASTER (published by group rank 0)
//   r<R>/waiting     late nodes waiting to get in (the running group restarts for them)
//   r<R>/done        members whose workers all succeeded (the exit barrier)
//   failure          summary line of the node that failed the job
//
// A round R ends when someone moves `state` on: a node whose workers failed to "R+1:k+1"
// (a restart; only the first mover counts it), a member that sees late nodes waiting to
// "R+1:k" (membership change), a node out of restarts to "failed".
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dpxrun/config.h"
#include "dpx/store/store.h"

namespace dpxrun {

struct RoundInfo {
  int round = 0;
  int restart_count = 0;
  int group_rank = 0;
  int group_world_size = 1;
  int rank_offset = 0;  // global ranks of this node: [rank_offset, rank_offset + nproc)
  int world_size = 1;
  int members = 1;
  std::string master_addr;
  int master_port = 0;
};

enum class GroupEvent { kNone, kRestart, kMembershipChange, kJobFailed };

// How the exit barrier ended: all members' workers finished, another node's failure restarts
// the group (this node must run again: ranks are re-assigned), or the job failed elsewhere.
enum class FinishResult { kDone, kRestart, kJobFailed };

class JobFailedElsewhere : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Rendezvous {
 public:
  // `interrupted` is polled while waiting; when it returns true the wait is abandoned.
  Rendezvous(const Config& config, std::function<bool()> interrupted);

  // Joins the next round and returns this node's place in it. Throws dpx::TimeoutError,
  // JobFailedElsewhere, or Interrupted.
  RoundInfo next_round();
  // Polled while workers run: has the rest of the job asked for a new round?
  GroupEvent poll();
  // This node's workers failed. True: restart (re-join); false: out of restarts, the job is
  // marked failed with `summary` so the other agents stop too.
  bool report_failure(const std::string& summary);
  // Why the job failed elsewhere (the failing node's summary line).
  std::string failure_elsewhere();
  // Our workers succeeded: wait (bounded) until all members' did, so the store outlives them.
  FinishResult finish(double timeout_seconds);

  std::shared_ptr<dpx::Store> store() const { return store_; }
  // A connection of its own to the rendezvous store (for a thread of the agent's).
  std::shared_ptr<dpx::Store> new_client() const;
  // Member `group_rank` of the current round, for messages: "node 2 at 10.0.0.3 (ranks 4-5)".
  std::string describe_member(int group_rank) const;
  // Where workers reach the store (DPX_AGENT_STORE: "dpx://" marks dpx's own store,
  // Note [Rendezvous stores]) and key prefix for heartbeats.
  std::string store_address() const {
    return "dpx://" + store_host_ + ":" + std::to_string(store_->port());
  }
  // The job token (DPX_STORE_TOKEN) of the rendezvous store and of the workers' store.
  const std::string& token() const { return token_; }
  std::string key(const std::string& k) const { return prefix_ + k; }
  bool hosts_store() const { return hosts_store_; }

  class Interrupted : public std::runtime_error {
   public:
    Interrupted() : std::runtime_error("interrupted") {}
  };

 private:
  struct State {
    bool failed = false;
    int round = 0;
    int restarts = 0;
    std::string text;
  };
  State read_state();
  int join_round(int round, double deadline, int& index);
  void publish_and_assign(int round, int index, int members, RoundInfo& info, double deadline);
  std::string wait_get(const std::string& k, double deadline, const char* what);
  void sleep_checked();

  Config config_;
  std::function<bool()> interrupted_;
  std::shared_ptr<dpx::Store> store_;
  std::string store_host_;
  bool hosts_store_ = false;
  std::string prefix_;
  std::string token_;
  std::string local_addr_;
  RoundInfo current_;
  std::vector<std::string> members_;  // describe_member's texts, by group rank
  bool in_round_ = false;
};

}  // namespace dpxrun
