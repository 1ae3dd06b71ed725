// Which nodes of a round are still there: every agent counts a key up twice a second, on a
// store connection and a thread of its own, for as long as it runs; a node whose count stands
// still is gone. Asked when the job fails, so the error names the lost node instead of leaving
// the reader with workers that each blame the peer next to them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dpx/store/store.h"

namespace dpxrun {

// Note [Lost nodes]
// When a host dies in the middle of a collective, its peers fail one after another: the ring
// neighbour of the dead host sees its connection reset, aborts its own group, and the ranks
// beyond it see *that* rank's connection close. Each error then names a live peer, and the one
// lost host is named nowhere. The agents know better: each beats (adds 1 to
// r<round>/beat<index> every kBeatSeconds) on a thread that does nothing else, so a busy or
// stopping agent still beats; an agent out of restarts reads every member's count, waits
// kWindowSeconds, reads again, and names the members whose count did not move, with their
// address and ranks, unless they said they left (an agent that ends sets r<round>/beat<i>/left:
// the other survivors of a failed job exit during the window). A count can stand still only if the agent's process is gone, stopped, or
// cut off from the store, which is what "lost" means here; an agent starved of the CPU for the
// whole window would be named too, so the message says "stopped answering", not "died".
class Liveness {
 public:
  static constexpr double kBeatSeconds = 0.5;
  static constexpr double kWindowSeconds = 2.0;

  // `store`: a connection of its own (the agent's is used by its main thread); `prefix`: the
  // rendezvous's key prefix.
  Liveness(std::shared_ptr<dpx::Store> store, std::string prefix);
  ~Liveness();
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  // From now on beat as member `index` of `round`.
  void beat_as(int round, int index);

  // Of members 0..members-1 of `round`: those whose beat stood still over kWindowSeconds.
  // Blocks for the window; empty if the store cannot be read.
  std::vector<int> silent(int round, int members);

  // For the agent that hosts the store, before it ends a failed job: waits until every other
  // member of `round` left or stopped beating, at most `timeout_seconds`, so that none of them
  // loses the store in the middle of its own last words (its liveness check, its summary).
  void await_others(int round, int members, int self, double timeout_seconds);

 private:
  std::string beat_key(int round, int index) const;
  void run();

  std::shared_ptr<dpx::Store> store_;  // used by the thread; silent() makes its reads on it too
  std::string prefix_;
  std::mutex mutex_;  // guards the key and store_'s use
  std::condition_variable wake_;
  std::string key_;  // "" until the first round
  bool stop_ = false;
  bool unreachable_ = false;  // the last beat failed: the destructor does not wait on the store
  std::thread thread_;
};

}  // namespace dpxrun
