// dpxrun --fault-tolerant (docs/fault_tolerance.md): no rounds. This node is one replica group;
// its workers fail and restart alone while the other nodes' go on, and a node that starts late
// (a replacement, a spare) joins by itself. The agent that hosts the rendezvous store also runs
// the coordinator (Note [Fault-tolerant steps] in src/ft/coordinator.cpp).
#include <signal.h>

#include <cstdio>

#include "dpx/errors.h"
#include "dpxrun/agent.h"
#include "dpxrun/clock_and_say.h"

namespace dpxrun {

int Agent::run_fault_tolerant() {
  rdzv_ = std::make_unique<Rendezvous>(config_, [] { return pending_signal() != 0; });
  const std::string prefix = rdzv_->key("ft/");
  if (rdzv_->hosts_store()) {
    dpx::ft::CoordinatorOptions o;
    o.min_groups = config_.min_nodes;
    o.max_groups = config_.max_nodes;
    o.first_quorum_wait = std::chrono::milliseconds(static_cast<long>(config_.timeouts.last_call * 1000));
    o.too_few_timeout = std::chrono::milliseconds(static_cast<long>(config_.timeouts.join * 1000));
    coordinator_ = std::make_unique<dpx::ft::Coordinator>(rdzv_->new_client(), prefix, o);
  }
  group_beat_ = std::make_unique<dpx::ft::GroupBeat>(rdzv_->new_client(), prefix);
  const int group = group_beat_->group();
  say("fault-tolerant: this node is replica group " + std::to_string(group) + " (" +
      std::to_string(config_.nproc_per_node) + " workers)" +
      (coordinator_ ? "; the coordinator runs here, with the store" : ""));
  for (int incarnation = 0;; ++incarnation) {
    RoundInfo r;
    r.round = r.restart_count = incarnation;
    r.group_rank = group;
    r.group_world_size = config_.max_nodes;
    r.world_size = config_.nproc_per_node;
    round_ = r;
    failures_.clear();
    start_workers(r);
    Outcome outcome;
    try {
      outcome = monitor(r);
    } catch (const dpx::DistributedError& e) {
      stop(SIGTERM);
      return finish_fault_tolerant(finish_failed(
          std::string("lost contact with the rendezvous store, where the fault-tolerance "
                      "coordinator runs (its host died or the network is cut): ") + e.what()));
    }
    if (outcome == Outcome::kSucceeded) {
      pump_.stop(1.0);
      group_beat_->done();
      succeeded_ = true;
      return finish_fault_tolerant(0);
    }
    if (outcome == Outcome::kSignal) {
      const int sig = pending_signal();
      say("got signal " + std::to_string(sig) + "; forwarding it to the workers");
      stop(sig);
      return finish_fault_tolerant(128 + sig);
    }
    // Tell the coordinator first, so the other groups stop waiting for this one's vote.
    try {
      group_beat_->failed(incarnation + 1);
    } catch (const dpx::DistributedError& e) {
      stop(SIGTERM);
      std::fprintf(stderr, "%s", failure_summary(config_.program[0], failures_).c_str());
      return finish_fault_tolerant(finish_failed(
          std::string("the workers failed and the rendezvous store, where the coordinator runs, "
                      "cannot be reached (the job ended, or its host died): not restarting. ") +
          e.what()));
    }
    stop(SIGTERM);
    const Failure& root = failures_.front();
    if (incarnation < config_.max_restarts) {
      say("worker " + failure_line(root) + "; restarting this group's workers only (" +
          std::to_string(incarnation + 1) + " of --max-restarts " +
          std::to_string(config_.max_restarts) + "); the other groups train on, and these heal "
          "from one of them");
      continue;
    }
    std::fprintf(stderr, "%s", failure_summary(config_.program[0], failures_).c_str());
    say("this group is out of restarts and leaves the job; the other groups train on");
    return finish_fault_tolerant(1);
  }
}

// The store and the coordinator live in this process: on the store's host, stay until every
// other group finished or left (bounded), whatever this group's own end.
int Agent::finish_fault_tolerant(int code) {
  group_beat_.reset();  // says this group left
  if (coordinator_) {
    coordinator_->await_groups(
        std::chrono::milliseconds(static_cast<long>(config_.exit_barrier_timeout * 1000)));
    coordinator_.reset();
  }
  return code;
}

}  // namespace dpxrun
