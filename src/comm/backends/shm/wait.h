// Waiting on peers' step counters: spin briefly, then sleep in FUTEX_WAIT on the shared word,
// so that on a machine with few cores a waiting rank gives its core to the rank it waits for.
// While asleep it wakes every few milliseconds to check that peers are alive (pidfd), that no
// peer aborted the group, and the collective's deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/backends/shm/segment.h"

namespace dpx::detail::shm {

using Clock = std::chrono::steady_clock;

struct WaitOptions {
  // Busy-wait this long before sleeping. Spinning pays off when every rank has a core.
  std::chrono::microseconds spin = std::chrono::microseconds(50);
  // How often a sleeping waiter checks peers' liveness and the deadline.
  std::chrono::milliseconds poll = std::chrono::milliseconds(5);
};

// A collective's deadline, read off the clock only when a wait has spun in vain: a collective
// whose peers are already there, or arrive while it spins, reads no clock (Note [Call cost] in
// process_group_shm.h). It counts from that moment, at most one spin (DPX_SHM_SPIN_US) after
// the collective began, against timeouts of seconds to minutes.
class Deadline {
 public:
  explicit Deadline(Clock::duration timeout = {}) : timeout_(timeout) {}
  Clock::time_point get() {
    if (at_ == Clock::time_point{}) at_ = Clock::now() + timeout_;
    return at_;
  }

 private:
  Clock::duration timeout_;
  Clock::time_point at_{};
};

// A futex on a word of this process only (a Work's "finished"): sleeps while `a` holds
// `expected`, at most `timeout`; may return early (a wake-up, a signal, spuriously).
void futex_wait_private(const std::atomic<std::uint32_t>& a, std::uint32_t expected,
                        Clock::duration timeout);
void futex_wake_private(const std::atomic<std::uint32_t>& a);

// Step counters wrap around; a counter has reached `target` when it is at most 2^31 ahead.
inline bool reached(std::uint32_t value, std::uint32_t target) {
  return static_cast<std::int32_t>(value - target) >= 0;
}

class Waiter {
 public:
  Waiter(Segment& segment, int rank, WaitOptions options, std::string where);
  ~Waiter();
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  // Publishes this rank's step and wakes peers sleeping on it.
  void post(std::uint32_t step);
  // Blocks until `peer` posted `target`. Throws PeerLostError when the peer (or any peer) died,
  // TimeoutError at the deadline, and the aborting rank's error type when a peer aborted.
  void wait(int peer, std::uint32_t target, Deadline& deadline, const char* op);
  // Throws when a peer aborted the group: its steps may be posted, but its data is not valid.
  void check_abort(const char* op) const;
  // Tells peers this rank failed, so they stop waiting for it at once.
  void abort(AbortKind kind, const std::string& message);

 private:
  void check_peers(int waited_for, const char* op);
  bool spin_until(const RankControl& c, std::uint32_t target) const;

  Segment& segment_;
  int rank_;
  WaitOptions options_;
  std::string where_;
  std::vector<int> pidfds_;       // -1 for ranks in this process or without a pidfd
  std::vector<char> checkable_;  // whether a peer's liveness can be checked at all
};

}  // namespace dpx::detail::shm
