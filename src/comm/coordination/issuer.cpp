#include "comm/coordination/issuer.h"

#include <algorithm>

#include "dpx/runtime/cuda.h"
#include "dpx/errors.h"

namespace dpx::detail {

// Waits first for the issuer to launch the collective, then for the collective, both within
// the caller's one timeout.
class Issuer::IssuedWork : public Work {
 public:
  IssuedWork(std::chrono::milliseconds timeout, const std::string& where,
             const std::string& name)
      : Work(timeout), where_(where), name_(name) {}

  void wait(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::shared_ptr<Work> launched;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_until(lock, deadline, [&] { return launched_ || error_; })) {
        throw TimeoutError(where_ + name_ + ": the collective was not issued within " +
                           std::to_string(timeout.count()) + " ms: the collectives before it, "
                           "or what issuing it waits for (a check across ranks, a copy from the "
                           "device), wait for a peer or a device that is stuck or gone.");
      }
      if (error_) std::rethrow_exception(error_);
      launched = launched_;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    launched->wait(std::max(left, std::chrono::milliseconds(0)));
  }
  using Work::wait;

  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_ != nullptr || (launched_ && launched_->is_completed());
  }

  std::exception_ptr exception() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) return error_;
    return launched_ ? launched_->exception() : nullptr;
  }

  std::chrono::steady_clock::time_point finished_at() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return launched_ ? launched_->finished_at() : std::chrono::steady_clock::time_point{};
  }

  void finish(std::shared_ptr<Work> launched, std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      launched_ = std::move(launched);
      error_ = error;
    }
    cv_.notify_all();
  }

 private:
  std::string where_;
  std::string name_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::shared_ptr<Work> launched_;
  std::exception_ptr error_;
};

Issuer::Issuer(std::chrono::milliseconds timeout, std::string where, std::string name,
               at::Device device)
    : timeout_(timeout), where_(std::move(where)), name_(std::move(name)), device_(device),
      thread_([this] { run(); }) {}

Issuer::~Issuer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Work> Issuer::submit(Launch launch) {
  auto work = std::make_shared<IssuedWork>(timeout_, where_, name_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({std::move(launch), work});
  }
  cv_.notify_one();
  return work;
}

void Issuer::run() {
  std::exception_ptr no_device;  // every collective fails with it
  try {
    cuda::set_current_device(device_);  // Note [Thread devices]
  } catch (...) {
    no_device = std::current_exception();
  }
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopped, and nothing left to issue
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    if (no_device) {
      task.work->finish(nullptr, no_device);
      continue;
    }
    try {
      auto launched = task.launch();
      task.launch = nullptr;  // drop the tensors it holds before the caller wakes
      task.work->finish(std::move(launched), nullptr);
    } catch (...) {
      task.work->finish(nullptr, std::current_exception());
    }
  }
}

}  // namespace dpx::detail
