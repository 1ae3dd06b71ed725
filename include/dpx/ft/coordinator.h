// The coordinator of fault-tolerant training and the agents' beats it reads (docs/fault_tolerance.md,
// Note [Fault-tolerant steps] in src/ft/coordinator.cpp). dpxrun --fault-tolerant runs the
// coordinator in the agent that hosts the rendezvous store, and a GroupBeat in every agent.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "dpx/store/store.h"

namespace dpx::ft {

struct CoordinatorOptions {
  int min_groups = 1;  // no step runs with fewer replica groups (they wait for a joiner)
  // The first quorum forms as soon as this many groups joined, and no step has more: groups
  // beyond it stand by (hot spares), healed and admitted when a member is lost.
  int max_groups = 1;
  // A group whose agent's beat stood still this long is dropped from the quorum.
  std::chrono::milliseconds drop_after{1000};
  // A member whose agent beats but who has not voted this long after the first member did is
  // dropped (its ranks hang). Above the Manager's cross_timeout, which bounds a slow reduction.
  std::chrono::milliseconds vote_timeout{std::chrono::seconds(60)};
  // After min_groups joined, the first quorum waits this long for max_groups.
  std::chrono::milliseconds first_quorum_wait{30000};
  // With fewer than min_groups alive for this long, the job fails (every rank is told why).
  std::chrono::milliseconds too_few_timeout{std::chrono::minutes(10)};
};

// Decides each step's quorum and whether it commits, on a thread of its own, through `store`
// (a connection of its own) under `prefix`. The job's store outlives it.
class Coordinator {
 public:
  Coordinator(std::shared_ptr<Store> store, std::string prefix, CoordinatorOptions options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // For the agent that hosts the store, at its end: waits until every replica group finished,
  // left or stopped beating, at most `timeout`, so that none loses the store in mid-step.
  void await_groups(std::chrono::milliseconds timeout);

  // Decisions published so far.
  std::int64_t decisions() const { return decisions_.load(); }

 private:
  class Loop;
  void run();

  std::shared_ptr<Store> store_;
  std::string prefix_;
  CoordinatorOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> decisions_{0};
  std::thread thread_;
};

// A replica group's agent: claims the group's id and counts `beat/<id>` up every `period` on
// a thread that does nothing else, so that a busy step never starves it; the coordinator drops
// the group when the count stands still (CoordinatorOptions::drop_after).
class GroupBeat {
 public:
  GroupBeat(std::shared_ptr<Store> store, std::string prefix,
            std::chrono::milliseconds period = std::chrono::milliseconds(100));
  ~GroupBeat();  // says the group left
  GroupBeat(const GroupBeat&) = delete;
  GroupBeat& operator=(const GroupBeat&) = delete;

  int group() const { return group_; }
  // The group's workers failed: its next incarnation is `incarnation` (the coordinator drops
  // the old one at once instead of waiting for its vote).
  void failed(int incarnation);
  // The group's workers finished training.
  void done();

 private:
  void run(std::chrono::milliseconds period);

  std::shared_ptr<Store> store_;
  std::string prefix_;
  int group_ = -1;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dpx::ft
