// The shm backend: ranks on one host exchange data through one shared-memory segment.
// Collectives run in issue order on one background thread per group; callers get a
// CompletionWork at once and block only in Work::wait.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/backends.h"
#include "comm/shm/algorithms.h"
#include "comm/shm/channel.h"
#include "comm/shm/segment.h"
#include "comm/shm/wait.h"
#include "dpx/comm/process_group.h"

namespace dpx::detail {

// A CompletionWork whose wait() first watches a flag for a moment: a small collective finishes
// within microseconds, sooner than a sleeping caller could be woken.
class ShmWork : public CompletionWork {
 public:
  ShmWork(std::chrono::milliseconds timeout, std::string where, std::chrono::microseconds spin)
      : CompletionWork(timeout, std::move(where)), spin_(spin) {}
  void wait(std::chrono::milliseconds timeout) override;
  using Work::wait;
  void finish(std::exception_ptr error = nullptr);

 private:
  std::chrono::microseconds spin_;
  std::atomic<bool> finished_{false};
};

class ShmGroup : public ProcessGroup {
 public:
  explicit ShmGroup(const BackendArgs& args);
  // Runs the collectives still queued (each ends within the timeout), then unmaps.
  ~ShmGroup() override;
  std::string backend() const override { return "shm"; }

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
  struct Task {
    shm::OpDescriptor desc;
    std::function<void(shm::Channel&)> body;
    std::shared_ptr<ShmWork> work;
  };

  std::shared_ptr<Work> enqueue(shm::OpKind kind, const at::Tensor& t, int reduce_op, int root,
                                std::function<void(shm::Channel&)> body);
  void run();
  void execute(Task& task);

  // Kept for the group's life: on rank 0 it may host the TCP store the other ranks still use.
  std::shared_ptr<Store> store_;
  std::unique_ptr<shm::Segment> segment_;
  std::unique_ptr<shm::Waiter> waiter_;
  std::unique_ptr<shm::Channel> channel_;
  shm::AlgorithmOptions algorithm_options_;
  std::exception_ptr broken_;  // the error that made the group unusable; worker thread only

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::atomic<int> queued_{0};  // queue_.size(), readable without the mutex
  std::chrono::microseconds queue_spin_{0};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dpx::detail
