// The process's MPI: initialised once, finalised at exit, and driven by one thread that makes
// every MPI call of dpx (Note [MPI thread]). Included only by the mpi backend's files, inside
// #if DPX_WITH_MPI.
//
// Note [MPI thread]
// MPI allows one MPI_Init per process, and OpenMPI ends a job whose process exits without
// MPI_Finalize; dpx makes and drops groups many times. So MPI belongs to the process, not to a
// group:
//  1. The first mpi group starts the thread, which calls MPI_Init_thread asking for
//     MPI_THREAD_SERIALIZED (only this thread calls MPI, so no MPI needs the slower MULTIPLE).
//     A program that initialised MPI itself must have asked for MPI_THREAD_MULTIPLE, since its
//     own calls and the thread's may then overlap; it also finalises MPI itself.
//  2. Groups hand the thread tasks (one per collective). The thread takes new tasks in call
//     order and polls every task in flight (MPI_Test), so non-blocking collectives of several
//     buckets progress together and a caller never blocks on MPI. With nothing in flight it
//     sleeps on a condition variable (after looking at the queue for 100 us: waking a
//     sleeping thread costs more than a small collective). While something is in flight it
//     polls continuously (OpenMPI's non-blocking collectives move only when MPI is called);
//     after kSpin in which no task moved (completed, or finished a step: Context::moves):
//      - while a caller waits for a collective, it yields the core between polls, and spins on:
//        the waiter sleeps, and nothing else wants the core;
//      - while none waits (DDP's buckets in flight during backward), it naps kNap between polls.
//        A thread that spins shares the core with backward in scheduler slices of milliseconds,
//        and each round of a ring needs both ranks' threads on a core at once, so a round
//        waited for both slices (a 16 MB bucket took 84 ms of a 95 ms backward, 3-16 ms on shm);
//        one that naps wakes ahead of backward (the scheduler favours a thread that slept) and
//        polls within a nap (20 us, plus the kernel's 50 us timer slack) of a peer's message (the
//        same bucket: 11-16 ms). A task taken in counts as a move, so new work is polled
//        continuously for kSpin first. Measured:
//        docs/performance.md, "DDP's buckets while backward runs".
//  3. At exit (atexit, registered once MPI is up) the thread stops and calls MPI_Finalize, which
//     OpenMPI completes even with requests still pending (a collective a stuck peer never
//     joined); the thread owns no other state, so nothing outlives it.
//  4. A caller waiting for its collective makes the MPI calls itself for up to 50 us (longer
//     for a collective the group has seen finish soon: Note [Waiting as long as it takes] in
//     collective.h), whenever the thread is not making them (turn_, taken with try_lock:
//     MPI_THREAD_SERIALIZED asks only that calls never overlap): it takes in what is queued and
//     polls every task in flight, as the thread would. mpirun binds a rank to one core, which
//     the caller and the thread then share: a small collective completes without the two
//     context switches of a hand-over and back. What the caller leaves in flight, it wakes the
//     thread to poll. A caller inside a blocking data step (Note [Blocking data step] in
//     collective.h, opt-in) returns when it ends, even past its wait's timeout. (1 ms for every
//     collective completes all-reduces of 256 KiB-1 MiB in the caller's hands, 0.95-1.00x raw
//     MPI's time against 1.04-1.18x, but on a loaded machine DDP lost up to 30% of its samples/s
//     in some rounds (the waiter burns a core others want), and on a quiet one no gain showed:
//     not kept, docs/performance.md.)
//     (Leaving blocking steps to the thread instead kept waits on time but cost the hand-over
//     again: 1.20-1.32x raw MPI from 64 KiB up against 0.82-1.04x, docs/performance.md.)
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dpx::detail::mpi {

class Task;

// What the MPI thread tells a task it polls, and what tasks tell each other through it
// (Note [Blocking data step] in collective.h).
struct Context {
  bool alone = false;  // the task polled is the only one in flight, and nothing is queued
  int undecided = 0;   // collectives that published "may block" and have not yet chosen
  // The task whose communicator creation MPI has in flight (Note [One creation at a time] in
  // setup.h), or null.
  const Task* creating = nullptr;
  bool creation_abandoned = false;  // its caller timed out (it may never complete)
  // Steps tasks completed so far (a descriptor exchange, a round of a ring): the thread naps
  // between polls only while nothing moves (Note [MPI thread], step 2).
  std::uint64_t moves = 0;
  // The largest epoch of the groups this process made (Note [Group epochs] in tags.h).
  std::uint32_t epochs = 0;
};

// One collective's steps on the MPI thread.
class Task {
 public:
  enum class State {
    kBusy,       // in flight: poll again at once
    kLingering,  // its caller has its answer (a timeout), but MPI still owns a request into its
                 // buffers: poll now and then until MPI lets go
    kDone,
  };
  virtual ~Task() = default;
  // On the MPI thread: first when the task is taken in, then at every poll.
  virtual State poll(Context& context) = 0;
};

class Runtime {
 public:
  // The process's runtime, started by the first call; throws DistributedError (every later
  // call too) when MPI cannot be initialised or was initialised with too low a thread level.
  static Runtime& instance();

  int rank() const { return rank_; }
  int size() const { return size_; }
  // "Open MPI v4.1.4, ..." (MPI_Get_library_version's first line).
  const std::string& library() const { return library_; }
  // This process's host, as a hash (Note [Blocking data step] in collective.h).
  std::uint64_t host() const { return host_; }
  // The largest message tag MPI allows (MPI_TAG_UB, at least 32767).
  int tag_ub() const { return tag_ub_; }

  // Runs `fn` where MPI calls are made (the MPI thread, or a waiter in its stead: step 4) and
  // returns when it did, rethrowing what it threw. False (and `fn` not run) once the thread
  // stopped at exit.
  bool call(const std::function<void()>& fn);
  void submit(std::shared_ptr<Task> task);
  // Step 4: makes the MPI calls in the thread's stead until `done` or `until`, while it is not
  // making them itself.
  void help(const std::atomic<bool>& done, std::chrono::steady_clock::time_point until);
  // A caller starts (+1) or ends (-1) waiting for a task (step 2: the thread then never naps).
  void waiting(int delta) { waiters_.fetch_add(delta, std::memory_order_relaxed); }

 private:
  struct Progress {
    bool stopped = false;
    bool busy = false;       // a task in flight wants to be polled again at once
    bool in_flight = false;  // tasks remain (busy or lingering)
    bool finished = false;   // a task completed
    bool moved = false;      // a task completed a step (Context::moves), or completed
  };
  Runtime();
  void run();
  // Under turn_: takes in what is queued and polls every task in flight once.
  Progress poll_once();
  void init();
  void stop();
  static void stop_at_exit();

  int rank_ = 0;
  int size_ = 1;
  std::string library_;
  std::uint64_t host_ = 0;
  int tag_ub_ = 32767;
  bool owns_mpi_ = false;  // we initialised MPI, so we finalise it

  std::mutex mutex_;
  std::condition_variable cv_;
  struct Item {
    std::shared_ptr<Task> task;
    const std::function<void()>* call = nullptr;  // or a call (its caller waits on done)
    std::exception_ptr* error = nullptr;
    bool* done = nullptr;
  };
  std::deque<Item> queue_;
  // Held by whichever thread makes MPI calls (MPI_THREAD_SERIALIZED); what it guards:
  std::mutex turn_;
  std::vector<std::shared_ptr<Task>> active_;
  std::deque<Item> intake_;
  Context context_;
  std::atomic<int> in_flight_{0};  // active_.size(), for the thread's idle check
  std::atomic<int> waiters_{0};    // callers inside a collective's wait (waiting())
  // 1 while queue_ holds something or stop_ is set: the thread reads it unlocked, and takes
  // the lock (to see either) only when it is set or nothing is in flight.
  std::atomic<int> queued_{0};
  bool stop_ = false;
  bool poked_ = false;  // a waiter left a task in flight (help()): poll it now
  bool stopped_ = false;
  std::condition_variable done_cv_;
  std::thread thread_;
};

// A caller waiting for a task, for as long as it lives (Runtime::waiting).
class Waiting {
 public:
  explicit Waiting(Runtime& runtime) : runtime_(runtime) { runtime_.waiting(1); }
  ~Waiting() { runtime_.waiting(-1); }
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;

 private:
  Runtime& runtime_;
};

// MPI's text for an error code.
std::string error_string(int code);

}  // namespace dpx::detail::mpi
