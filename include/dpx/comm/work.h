// The handle of an asynchronous collective.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

namespace dpx {

class Work {
 public:
  explicit Work(std::chrono::milliseconds default_timeout) : default_timeout_(default_timeout) {}
  virtual ~Work() = default;

  // Blocks until the collective finished. Rethrows its error; throws TimeoutError when
  // `timeout` passes first (the collective itself may still be running then).
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  void wait() { wait(default_timeout_); }

  // Makes what the calling thread queues next on its current device stream see the result,
  // as PyTorch's Work::synchronize and CUDA futures do. A device backend (nccl) only orders the
  // streams and the host goes on at once: a collective that fails or hangs then surfaces in a
  // later call, once c10d's watchdog has aborted the group at the group's timeout
  // (docs/backends.md). A host backend has no stream to order: this is wait().
  virtual void synchronize() { wait(); }

  virtual bool is_completed() = 0;

  // The error the collective failed with; null while it runs or once it succeeded.
  virtual std::exception_ptr exception() = 0;

  // When the collective finished, for the timeline; the clock's epoch while it runs or where
  // the backend does not know.
  virtual std::chrono::steady_clock::time_point finished_at() { return {}; }

 protected:
  // What a wait that ran out of `timeout` raises (TimeoutError); `where` names the rank.
  static std::string timeout_message(const std::string& where, std::chrono::milliseconds timeout);

  std::chrono::milliseconds default_timeout_;
};

// A Work that a backend's own thread completes with complete().
class CompletionWork : public Work {
 public:
  CompletionWork(std::chrono::milliseconds default_timeout, std::string where);

  void wait(std::chrono::milliseconds timeout) override;
  using Work::wait;
  bool is_completed() override;
  std::exception_ptr exception() override;

  void complete(std::exception_ptr error = nullptr);
  std::chrono::steady_clock::time_point finished_at() override;

 private:
  std::string where_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point finished_at_;
};

}  // namespace dpx
