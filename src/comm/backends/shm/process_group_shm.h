// The shm backend: ranks on one host exchange data through one shared-memory segment.
// Collectives run in issue order on one background thread per group; callers get a
// CompletionWork at once and block only in Work::wait.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/backends/backend_args.h"
#include "comm/backends/shm/algorithms.h"
#include "comm/backends/shm/channel.h"
#include "comm/backends/shm/segment.h"
#include "comm/backends/shm/wait.h"
#include "comm/shared_memory.h"
#include "dpx/comm/process_group.h"

namespace dpx::detail {

class ShmGroup;

// Note [Helping]
// A thread wake-up costs more here than a small all-reduce, and the caller of wait() is idle
// anyway: so wait() first runs queued collectives itself (in issue order, one thread at a time)
// until its own is done, then watches a flag for a moment, and only then sleeps. It helps only
// when it may block as long as the collective's own deadline (the default wait()), so a wait
// with a shorter timeout still returns on time. While callers help, issuing a collective does
// not wake the group's thread (that wake-up would take the core a peer needs); the thread then
// polls the queue every millisecond instead; a collective that waited for such a poll (nobody
// was waiting for it) ends the mode. A poll that finds a collective issued since the one before
// leaves it to its caller for a moment (kGrace) first: that caller is most likely between
// issuing and waiting, on the same core when ranks are pinned, and a poll that took the
// collective from it ended the mode for nothing; each collective then woke this thread (two
// context switches) until a caller won the race again.
//
// Note [Call cost]
// A small collective costs little more than its data's trip between cores (dpx-bench pingpong),
// so what surrounds it is kept off the clock, the allocator and locks: a ShmWork is one
// allocation, holds no copy of the rank's name (the group's, shared) and no mutex or condition
// variable (a waiter that must sleep does so on a futex on its finished word); a task holds its
// tensors and options by value, with no std::function; a wait that finds its collective done
// takes no lock, and a helper's release of the group takes none when nothing else is queued
// (two lock/unlock pairs per collective remain: issuing it and claiming it); no clock
// is read on the way unless something has to wait (the channel's Deadline, the spin's end, the
// group's polls counted rather than timed; the stall inspector's note reads the kernel's coarse
// clock). A collective's finish time (finished_at, for the timeline) is read only for
// collectives over kTimedBytes, whose cost dwarfs the read; smaller ones say "not known", and
// the timeline takes the time their wait returned. The small all-reduce allocates nothing, and
// up to 8 bytes of an all-reduce's or a broadcast's data ride in the line that carries the post
// (Note [Inline data] in segment.h). What the call still costs (docs/performance.md, issue #47): the Work's one
// allocation and reference counts, the tensor's, and the queue's two lock/unlock pairs.
constexpr std::size_t kTimedBytes = 64 << 10;

class ShmWork : public Work {
 public:
  ShmWork(std::weak_ptr<ShmGroup> group, std::chrono::milliseconds timeout,
          std::shared_ptr<const std::string> where, std::chrono::microseconds spin, bool timed)
      : Work(timeout), group_(std::move(group)), where_(std::move(where)), spin_(spin),
        timed_(timed) {}
  void wait(std::chrono::milliseconds timeout) override;
  using Work::wait;
  bool is_completed() override { return finished(); }
  std::exception_ptr exception() override { return finished() ? error_ : nullptr; }
  std::chrono::steady_clock::time_point finished_at() override {
    return finished() ? finished_at_ : std::chrono::steady_clock::time_point{};
  }
  void finish(std::exception_ptr error = nullptr);
  bool finished() const { return finished_.load(std::memory_order_acquire) != 0; }

 private:
  // Blocks until finished or `timeout` (on a futex on finished_); false at the timeout.
  bool sleep_until_finished(std::chrono::milliseconds timeout);

  std::weak_ptr<ShmGroup> group_;
  std::shared_ptr<const std::string> where_;
  std::chrono::microseconds spin_;
  bool timed_;
  std::exception_ptr error_;  // written before finished_ turns true, read after
  std::chrono::steady_clock::time_point finished_at_;
  std::atomic<std::uint32_t> finished_{0};  // the futex word sleepers wait on
  std::atomic<int> sleepers_{0};  // waiters asleep on finished_; finish() wakes only then
};

class ShmGroup : public ProcessGroup,
                 public SharedMemory,
                 public std::enable_shared_from_this<ShmGroup> {
 public:
  explicit ShmGroup(const BackendArgs& args);
  // Runs the collectives still queued (each ends within the timeout), then unmaps.
  ~ShmGroup() override;
  std::string backend() const override { return "shm"; }

  // Runs queued collectives on the calling thread until `work` finished or another thread is
  // running one (Note [Helping]).
  void help(const ShmWork& work);
  // Marks the group failed by this rank's timeout, so that every peer's next collective fails.
  void abort_timed_out(const std::string& message);
  // Marks the group failed for a reason found outside it (a hierarchical group's lost host):
  // every peer's current and next collective fails with `kind`'s error type and `message`.
  void abort(shm::AbortKind kind, const std::string& message);

  // Note [Shared buckets] (comm/shared_memory.h): a segment of its own, one part per rank.
  at::Tensor allocate_shared(std::size_t bytes) override;

  // The segment's name while it existed (for tests: it must be gone from /dev/shm).
  const std::string& segment_name() const { return segment_->name(); }

 protected:
  std::shared_ptr<Work> do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) override;
  std::shared_ptr<Work> do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) override;
  std::shared_ptr<Work> do_allgather(at::Tensor& output, const at::Tensor& input) override;
  std::shared_ptr<Work> do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                          const ReduceScatterOptions& opts) override;
  std::shared_ptr<Work> do_barrier() override;

 private:
  // A collective as issued: what execute() runs, by value (Note [Call cost]).
  struct Task {
    CollectiveDescriptor desc;
    at::Tensor a, b;  // allreduce/broadcast: a; allgather/reduce_scatter: a output, b input
    ReduceOp op = ReduceOp::kSum;
    int root = 0;
    std::shared_ptr<shm::Segment> shared;  // a shared all-reduce's segment, at `offset`
    std::size_t offset = 0;
    std::shared_ptr<ShmWork> work;
    std::uint64_t polls = 0;  // the group thread's polls when it was issued
  };

  std::shared_ptr<Work> enqueue(Task task);
  void run_body(Task& task);
  void run();
  bool claim(Task& task);  // a waiting caller takes the next collective unless one is running
  void release();          // after running a claimed one
  void execute(Task& task);

  // Kept for the group's life: on rank 0 it may host the TCP store the other ranks still use.
  std::shared_ptr<Store> store_;
  std::unique_ptr<shm::Segment> segment_;
  std::unique_ptr<shm::Waiter> waiter_;
  std::unique_ptr<shm::Channel> channel_;
  shm::AlgorithmOptions algorithm_options_;
  bool shared_buckets_ = true;  // DPX_SHM_SHARED_BUCKETS
  // The segments allocate_shared made, numbered in the control line's int8 (LineDescriptor).
  SharedBlocks<shm::Segment> shared_{127};
  std::exception_ptr broken_;  // the error that made the group unusable; worker thread only

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  // queue_.size(), written under mutex_: release() reads it without the lock (Note [Call cost]).
  std::atomic<std::size_t> queued_{0};
  std::uint64_t polls_ = 0;  // wake-ups of the group thread by its poll, not by a notify
  bool issued_since_poll_ = false;
  // A thread runs a claimed collective. Set under mutex_; cleared by release() without it.
  std::atomic<bool> executing_{false};
  bool callers_help_ = false;  // the last collective ran on a waiting caller's thread
  std::atomic<bool> stop_{false};  // written under mutex_
  std::chrono::microseconds spin_{0};
  std::shared_ptr<const std::string> where_shared_;  // every ShmWork's name for this rank
  std::thread thread_;
};

std::shared_ptr<ProcessGroup> make_shm_group(const BackendArgs& args);

}  // namespace dpx::detail
