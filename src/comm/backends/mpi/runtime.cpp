// Note [MPI thread] in runtime.h.
#if DPX_WITH_MPI
#include "comm/backends/mpi/runtime.h"

#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <vector>

#include "comm/backends/mpi/datatypes.h"
#include "comm/plan/placement.h"
#include "dpx/errors.h"

namespace dpx::detail::mpi {
namespace {

using Clock = std::chrono::steady_clock;

// Polling this long without a task moving makes the thread yield (a caller waits) or nap (none
// does) between polls (Note [MPI thread], step 2).
constexpr auto kSpin = std::chrono::microseconds(50);
// The nap asked for; Linux's timer slack (50 us for a normal thread) comes on top of it.
constexpr auto kNap = std::chrono::microseconds(20);
// How long the idle thread looks for new tasks before it sleeps.
constexpr auto kIdleSpin = std::chrono::microseconds(100);
// How often lingering tasks are polled when nothing else is in flight.
constexpr auto kLingerPoll = std::chrono::milliseconds(1);

const char* thread_level(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

std::mutex g_instance_mutex;
Runtime* g_instance = nullptr;  // never deleted: its thread is stopped at exit instead
std::exception_ptr g_failed;

}  // namespace

std::string error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, len);
}

Runtime& Runtime::instance() {
  std::lock_guard<std::mutex> lock(g_instance_mutex);
  if (g_instance) return *g_instance;
  if (g_failed) std::rethrow_exception(g_failed);
  try {
    g_instance = new Runtime();
  } catch (...) {
    g_failed = std::current_exception();
    throw;
  }
  return *g_instance;
}

Runtime::Runtime() {
  std::exception_ptr error;
  bool ready = false;
  // The constructor's locals live until `ready`; the thread reads only its own copy after.
  thread_ = std::thread([this, &error, &ready] {
    std::exception_ptr failed;
    try {
      init();
    } catch (...) {
      failed = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error = failed;
      ready = true;
    }
    done_cv_.notify_all();
    if (!failed) {
      run();
    } else if (owns_mpi_) {
      MPI_Finalize();  // up, but unusable: OpenMPI would end the job at exit without it
    }
  });
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return ready; });
  lock.unlock();
  if (error) {
    thread_.join();
    std::rethrow_exception(error);
  }
  std::atexit(&Runtime::stop_at_exit);
}

void Runtime::init() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    throw DistributedError("mpi backend: MPI was already finalised in this process (MPI allows "
                           "one MPI_Init per process); make the mpi groups before MPI_Finalize");
  }
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      throw DistributedError(std::string("mpi backend: this program initialised MPI with ") +
                             thread_level(provided) + ", but dpx calls MPI from a thread of its "
                             "own while the program may call it too; initialise it with "
                             "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...), or let dpx "
                             "initialise it (do not call MPI_Init)");
    }
  } else {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      throw DistributedError("mpi backend: MPI_Init_thread failed (" + error_string(rc) +
                             "); start the program with mpirun or srun --mpi=pmix");
    }
    owns_mpi_ = true;
    if (provided < MPI_THREAD_SERIALIZED) {
      // MPI is up and cannot be brought up again: finalise it at exit all the same.
      throw DistributedError(std::string("mpi backend: the MPI library offers only ") +
                             thread_level(provided) + ", and dpx needs MPI_THREAD_SERIALIZED "
                             "(it calls MPI from a thread of its own); use an MPI built with "
                             "thread support");
    }
  }
  create_user_ops();
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  library_.assign(version, len);
  library_ = library_.substr(0, library_.find_first_of("\n,"));
  int* tag_ub = nullptr;
  int has_tag_ub = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has_tag_ub);
  if (has_tag_ub && tag_ub) tag_ub_ = *tag_ub;
  // Note [Blocking data step], one host: Note [What a host is] (namespaces split hosts).
  host_ = std::hash<std::string>()(host_identity());
}

bool Runtime::call(const std::function<void()>& fn) {
  std::exception_ptr error;
  bool done = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return false;
    queue_.push_back({nullptr, &fn, &error, &done});
    queued_.store(1, std::memory_order_release);
  }
  cv_.notify_one();
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return done || stopped_; });
  lock.unlock();
  if (!done) return false;
  if (error) std::rethrow_exception(error);
  return true;
}

void Runtime::submit(std::shared_ptr<Task> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stop_, "mpi backend: a collective was issued while the process exits");
    queue_.push_back({std::move(task)});
    queued_.store(1, std::memory_order_release);
  }
  cv_.notify_one();
}

void Runtime::run() {
  auto last_done = Clock::now();
  std::uint32_t polls = 0;  // the clock: every 16th busy poll (a read costs a quarter of one)
  bool napping = false;     // nothing moved for kSpin: yield or nap between polls (step 2)
  for (;;) {
    if (in_flight_.load(std::memory_order_acquire) == 0) {
      // A thread asleep takes microseconds to wake, more than a small collective lasts: look
      // at the queue for a while before sleeping (a loop of allreduce()->wait() never sleeps).
      const auto until = Clock::now() + kIdleSpin;
      while (queued_.load(std::memory_order_acquire) == 0 &&
             in_flight_.load(std::memory_order_acquire) == 0 && Clock::now() < until) {
        sched_yield();
      }
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] {
        return stop_ || !queue_.empty() || in_flight_.load(std::memory_order_acquire) != 0;
      });
      if (stop_) break;
      last_done = Clock::now();  // work arrived: spin kSpin before any nap
      napping = false;
    }
    std::unique_lock<std::mutex> turn(turn_, std::try_to_lock);
    if (!turn.owns_lock()) {  // a waiter makes the calls (step 4 of Note [MPI thread])
      sched_yield();
      continue;
    }
    const Progress p = poll_once();
    turn.unlock();
    if (p.stopped) break;
    if (p.moved) {
      last_done = Clock::now();
      napping = false;
    }
    if (!p.busy && p.in_flight) {
      // Only lingering tasks: poll them now and then, or at once when a waiter left a live one.
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait_for(lock, kLingerPoll, [&] { return stop_ || !queue_.empty() || poked_; });
      poked_ = false;
    } else if (p.busy) {
      if (!napping && (++polls & 15U) == 0 && Clock::now() - last_done > kSpin) napping = true;
      if (napping && waiters_.load(std::memory_order_relaxed) != 0) {
        sched_yield();  // a caller waits for what is in flight: nothing else wants the core
      } else if (napping) {  // a new task ends the nap at once
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait_for(lock, kNap, [&] { return stop_ || !queue_.empty(); });
      }
    }
  }
  std::lock_guard<std::mutex> turn(turn_);  // no waiter is making a call, and none will (stop_)
  in_flight_.store(0, std::memory_order_release);
  // The tasks still in flight (lingering ones: a peer that never came) are never dropped, so
  // their tensors outlive MPI's hold on them: a ring's receive that arrives over TCP while MPI
  // finalises writes into its buffer. Dropped before MPI_Finalize, their memory was freed under
  // it (the heap was found corrupt in MPI_Finalize, mpi.two_hosts on LibTorch 1.13, 1 run of
  // 3); dropped after it, mpi.np2 hung at exit in 2 runs of 10. The process is ending, and a
  // program that finalises MPI itself does so later still.
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

Runtime::Progress Runtime::poll_once() {
  Progress p;
  if (queued_.load(std::memory_order_acquire) != 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) {
      p.stopped = true;
      return p;
    }
    intake_.swap(queue_);
    queued_.store(0, std::memory_order_relaxed);
  }
  p.moved = !intake_.empty();  // new work: the thread spins a while before it naps
  for (auto& item : intake_) {
    if (item.task) {
      active_.push_back(std::move(item.task));
      continue;
    }
    try {
      (*item.call)();
    } catch (...) {
      *item.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      *item.done = true;
    }
    done_cv_.notify_all();
  }
  intake_.clear();
  // In order, and new tasks last in the order they came: a task's first poll issues its first
  // MPI call, and every rank must issue a group's collectives in one order.
  bool finished = false;
  const std::uint64_t moves = context_.moves;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < active_.size(); ++i) {
    context_.alone = active_.size() == 1 && queued_.load(std::memory_order_acquire) == 0;
    const Task::State s = active_[i]->poll(context_);
    if (s == Task::State::kDone) {
      finished = true;
      continue;
    }
    p.busy = p.busy || s == Task::State::kBusy;
    if (kept != i) active_[kept] = std::move(active_[i]);
    ++kept;
  }
  active_.resize(kept);
  p.finished = finished;
  p.moved = p.moved || finished || context_.moves != moves;
  p.in_flight = !active_.empty();
  in_flight_.store(static_cast<int>(active_.size()), std::memory_order_release);
  return p;
}

void Runtime::help(const std::atomic<bool>& done, std::chrono::steady_clock::time_point until) {
  // The clock on every 8th round only (a read costs about a quarter of a poll).
  for (std::uint32_t round = 0; !done.load(std::memory_order_acquire); ++round) {
    if ((round & 7U) == 0 && Clock::now() >= until) break;
    std::unique_lock<std::mutex> turn(turn_, std::try_to_lock);  // released if a poll throws
    if (!turn.owns_lock()) {
      sched_yield();
      continue;
    }
    const Progress p = poll_once();
    turn.unlock();
    if (p.stopped) return;
  }
  // What it took in and left in flight, the thread must poll: wake it, whether it sleeps idle
  // (it looks at in_flight_ under mutex_ first) or between polls of lingering tasks (poked_).
  if (in_flight_.load(std::memory_order_acquire) != 0) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      poked_ = true;
    }
    cv_.notify_one();
  }
}

void Runtime::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return;
    stop_ = true;
    queued_.store(1, std::memory_order_release);  // the thread looks under the lock only then
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
  }
  done_cv_.notify_all();
}

void Runtime::stop_at_exit() {
  std::lock_guard<std::mutex> lock(g_instance_mutex);
  if (g_instance) g_instance->stop();
}

}  // namespace dpx::detail::mpi
#endif  // DPX_WITH_MPI
