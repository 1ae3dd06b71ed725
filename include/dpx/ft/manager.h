// Fault-tolerant training (docs/fault_tolerance.md): each host is a replica group; a lost group
// is dropped within about a second while the others train on, and a restarted group heals from
// a peer and rejoins. Under `dpxrun --fault-tolerant`:
//
//   dpx::ft::Manager manager;                       // reads dpxrun's DPX_FT_* variables
//   manager.register_state(*model, optimizer, {progress});
//   while (manager.start_step()) {                  // may heal this group from a peer
//     ... forward on this rank's share of the step: manager.participant(), participants() ...
//     loss.backward();
//     manager.allreduce_gradients(model->parameters());
//     if (manager.should_commit()) optimizer.step();   // else the same step again
//     optimizer.zero_grad();
//   }
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dpx/comm/process_group.h"
#include "dpx/store/store.h"

namespace dpx::ft {

namespace detail {
struct Decision;
}

struct ManagerOptions {
  // How long a collective across groups may take before it counts as failed (the step then
  // does not commit). A killed peer fails it at once; this bounds a peer that hangs.
  std::chrono::milliseconds cross_timeout{std::chrono::seconds(30)};
  // Every call to the store but the wait for a decision: a store that does not answer this long
  // is lost (its host died or stopped), and so is the coordinator that runs beside it.
  std::chrono::milliseconds store_timeout{std::chrono::seconds(10)};
  // The longest wait for the coordinator's decision (it answers within a second or so of the
  // last vote or the loss of a group; longer only while too few groups are alive).
  std::chrono::milliseconds decision_timeout{std::chrono::minutes(15)};
  // Unset: from dpxrun --fault-tolerant's environment (DPX_FT_STORE, DPX_FT_PREFIX,
  // DPX_FT_GROUP, DPX_FT_INCARNATION, LOCAL_RANK, LOCAL_WORLD_SIZE).
  std::shared_ptr<Store> store;
  std::string prefix;
  int group = -1;
  int incarnation = 0;
  int local_rank = -1;
  int local_size = -1;
};

struct ManagerStats {
  std::int64_t commits = 0;    // steps this group committed
  std::int64_t aborts = 0;     // attempts that did not commit (retried with the next quorum)
  std::int64_t quorums = 0;    // cross-group groups made
  std::int64_t heals_sent = 0, heals_received = 0;
  double heal_seconds = 0;     // the last heal received: the state's broadcast and load
  std::int64_t heal_bytes = 0;
};

class Manager {
 public:
  explicit Manager(ManagerOptions options = {});
  ~Manager();
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // What a joining group takes from a peer: `module`'s parameters and buffers, `optimizer`'s
  // state, and `extra` tensors (the loop's own counters), all updated in place.
  void register_state(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                      std::vector<at::Tensor> extra = {});

  // Before each step. Joins the quorum on the first call, remakes the cross-group groups after
  // a change, heals this group if it is new. False: every other group finished training before
  // this one could join.
  bool start_step();
  // Sums every rank's gradients of `parameters` across the step's groups and divides by the
  // ranks that took part (a missing gradient counts as zeros). A failure across groups is
  // recorded, not thrown: the step will not commit. A failure inside the group throws.
  void allreduce_gradients(const std::vector<at::Tensor>& parameters);
  // Whether every group's reduction succeeded, decided by the coordinator: true -> step the
  // optimizer; false -> skip it (the step runs again). Throws DistributedError when this group
  // was dropped (its agent restarts it) or the job cannot go on.
  bool should_commit();

  std::int64_t step() const { return step_; }    // steps committed so far
  int participants() const;                      // groups in the current step
  int participant() const;                       // this group's place among them
  int group() const { return options_.group; }   // this group's id (fixed across restarts)
  int local_rank() const { return options_.local_rank; }
  int local_size() const { return options_.local_size; }
  ProcessGroup& local_group() { return *local_; }  // the ranks of this group (shm)
  const ManagerStats& stats() const { return stats_; }

 private:
  struct State;
  detail::Decision wait_decision(std::int64_t attempt);
  bool decided(std::int64_t attempt);  // the decision on `attempt` is out
  [[noreturn]] void lost_coordinator(const std::exception& e) const;
  bool join();
  void make_cross(const detail::Decision& d);
  void heal(const detail::Decision& d);
  void say(const std::string& line) const;
  std::string where() const;  // "[group G rank L/N host:pid] ", for errors

  ManagerOptions options_;
  std::shared_ptr<ProcessGroup> local_;
  std::shared_ptr<ProcessGroup> cross_;
  std::shared_ptr<Work> cross_work_;  // cross_'s last collective
  // Groups given up on, each with its last collective: dropped once that completed.
  std::vector<std::pair<std::shared_ptr<ProcessGroup>, std::shared_ptr<Work>>> abandoned_;
  std::unique_ptr<detail::Decision> current_;  // the decision the next attempt runs under
  std::unique_ptr<State> state_;
  std::int64_t attempt_ = 0;  // the decision current_ is
  std::int64_t step_ = 0;
  std::int64_t quorum_ = -1;  // the quorum cross_ was made for
  std::int64_t committed_quorum_ = -1;  // the quorum of the last commit
  bool joined_ = false;
  bool pending_ = false;      // current_ has not been applied (cross groups, heal) yet
  bool cross_ok_ = true;
  ManagerStats stats_;
};

}  // namespace dpx::ft
