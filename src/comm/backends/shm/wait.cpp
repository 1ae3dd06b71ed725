#include "comm/backends/shm/wait.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "dpx/errors.h"

namespace dpx::detail::shm {
namespace {

constexpr int kTightPolls = 256;

std::uint32_t* word(const std::atomic<std::uint32_t>& a) {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  return reinterpret_cast<std::uint32_t*>(const_cast<std::atomic<std::uint32_t>*>(&a));
}

// Shared (not FUTEX_PRIVATE): the word lives in memory mapped by several processes.
void futex_wait(const std::atomic<std::uint32_t>& a, std::uint32_t expected,
                std::chrono::milliseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000),
              static_cast<long>(timeout.count() % 1000) * 1000000L};
  ::syscall(SYS_futex, word(a), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(const std::atomic<std::uint32_t>& a) {
  ::syscall(SYS_futex, word(a), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

void futex_wait_private(const std::atomic<std::uint32_t>& a, std::uint32_t expected,
                        Clock::duration timeout) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  ::syscall(SYS_futex, word(a), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

void futex_wake_private(const std::atomic<std::uint32_t>& a) {
  ::syscall(SYS_futex, word(a), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Whether the process behind `pidfd` (or `pid` without one) has exited. A pidfd turns readable
// when its process exits, zombie or not, and never names a recycled pid.
bool exited(int pidfd, int pid) {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }
  return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

Waiter::Waiter(Segment& segment, int rank, WaitOptions options, std::string where)
    : segment_(segment), rank_(rank), options_(options), where_(std::move(where)),
      pidfds_(segment.world(), -1), checkable_(segment.world(), 1) {
  for (int r = 0; r < segment.world(); ++r) {
    const int pid = segment.control(r).pid.load();
    if (r == rank || pid == ::getpid()) continue;  // ranks in this process
    pidfds_[r] = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    // Without pidfds, kill(pid, 0); a pid outside our pid namespace cannot be checked at all,
    // and then only the timeout ends a wait for it.
    if (pidfds_[r] < 0) checkable_[r] = errno == ENOSYS;
  }
}

Waiter::~Waiter() {
  for (int fd : pidfds_) {
    if (fd >= 0) ::close(fd);
  }
}

void Waiter::post(std::uint32_t step) {
  RankControl& me = segment_.control(rank_);
  me.step.store(step, std::memory_order_seq_cst);
  // Pairs with the waiter's sleepers increment before its last check (both seq_cst): either it
  // sees the new step, or we see it asleep and wake it.
  if (me.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake(me.step);
}

bool Waiter::spin_until(const RankControl& c, std::uint32_t target) const {
  // Plain loads first, no pause between them: a peer of a small collective is usually well
  // under a microsecond away, and a pause (up to ~140 cycles) would delay seeing its post.
  for (int i = 0; i < kTightPolls; ++i) {
    if (reached(c.step.load(std::memory_order_acquire), target)) return true;
  }
  const auto end = Clock::now() + options_.spin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (reached(c.step.load(std::memory_order_acquire), target)) return true;
      cpu_relax();
    }
    if (Clock::now() >= end) return false;
    // Hand the core over if anything else wants it (the awaited peer, when ranks outnumber
    // cores); returns at once otherwise.
    ::sched_yield();
  }
}

void Waiter::wait(int peer, std::uint32_t target, Deadline& deadline, const char* op) {
  RankControl& c = segment_.control(peer);
  if (reached(c.step.load(std::memory_order_acquire), target)) return;
  if (options_.spin.count() > 0 && spin_until(c, target)) return;
  for (;;) {
    check_peers(peer, op);
    const auto now = Clock::now();
    if (now >= deadline.get()) {
      const std::string msg = where_ + "shm " + op + ": rank " + std::to_string(peer) +
                              " did not reach this collective in time (the group timeout "
                              "passed). It is alive but stuck, slow or issuing other "
                              "collectives; raise the timeout if the job is just slow.";
      abort(AbortKind::kTimeout, msg);
      throw TimeoutError(msg);
    }
    c.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const std::uint32_t seen = c.step.load(std::memory_order_seq_cst);
    if (!reached(seen, target)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.get() - now);
      futex_wait(c.step, seen, std::max(std::chrono::milliseconds(1),
                                        std::min(options_.poll, left)));
    }
    c.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(c.step.load(std::memory_order_acquire), target)) return;
  }
}

void Waiter::check_peers(int waited_for, const char* op) {
  check_abort(op);
  // Only the awaited peer's liveness: a peer that finished its last collective and exited is
  // fine, and a live peer stuck behind a dead one finds out itself and aborts the group.
  const int r = waited_for;
  if (!checkable_[r] || !exited(pidfds_[r], segment_.control(r).pid.load())) return;
  const std::string msg = where_ + "shm " + op + ": rank " + std::to_string(r) + " (pid " +
                          std::to_string(segment_.control(r).pid.load()) +
                          ") exited while this rank waited for it; the group cannot continue "
                          "without it. See rank " + std::to_string(r) + "'s log for why it ended.";
  abort(AbortKind::kPeerLost, msg);
  throw PeerLostError(msg);
}

void Waiter::check_abort(const char* op) const {
  Header& h = segment_.header();
  const std::uint32_t aborted = h.abort_rank.load(std::memory_order_acquire);
  if (aborted == 0 || aborted == static_cast<std::uint32_t>(rank_) + 1) return;
  const std::string msg = where_ + "shm " + op + ": rank " + std::to_string(aborted - 1) +
                          " aborted the group: " + h.abort_message;
  switch (static_cast<AbortKind>(h.abort_kind.load())) {
    case AbortKind::kPeerLost: throw PeerLostError(msg);
    case AbortKind::kTimeout: throw TimeoutError(msg);
    default: throw DistributedError(msg);
  }
}

void Waiter::abort(AbortKind kind, const std::string& message) {
  Header& h = segment_.header();
  std::uint32_t expected = 0;
  // Only the first abort is recorded; its message is written before the rank becomes visible.
  static_assert(sizeof(h.abort_message) > 1);
  if (h.abort_kind.compare_exchange_strong(expected, static_cast<std::uint32_t>(kind))) {
    std::strncpy(h.abort_message, message.c_str(), sizeof(h.abort_message) - 1);
    h.abort_rank.store(static_cast<std::uint32_t>(rank_) + 1, std::memory_order_release);
    for (int r = 0; r < segment_.world(); ++r) futex_wake(segment_.control(r).step);
  }
}

}  // namespace dpx::detail::shm
