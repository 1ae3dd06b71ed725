// A Work that, once the collective under it has finished, copies its result to where the caller
// wants it, exactly once, in wait(): on the waiting thread (and, for a device, its current
// stream). is_completed() only looks: the stall inspector asks it from its own thread, where a
// copy would run on the wrong stream, under the inspector's lock. The staged groups (device
// tensors over a host group) and DDP's control tensors (host tensors over a device group) use it.
#pragma once

#include <functional>
#include <memory>
#include <mutex>

#include "dpx/comm/work.h"

namespace dpx::detail {

class CopyBackWork : public Work {
 public:
  CopyBackWork(std::shared_ptr<Work> inner, std::function<void()> copy_back,
               std::chrono::milliseconds timeout)
      : Work(timeout), inner_(std::move(inner)), copy_back_(std::move(copy_back)) {}

  void wait(std::chrono::milliseconds timeout) override {
    inner_->wait(timeout);
    finish();
  }
  using Work::wait;
  bool is_completed() override { return inner_->is_completed(); }
  std::exception_ptr exception() override { return inner_->exception(); }

 private:
  void finish() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (copy_back_) {
      auto copy = std::move(copy_back_);
      copy_back_ = nullptr;
      copy();
    }
  }

  std::shared_ptr<Work> inner_;
  std::mutex mutex_;
  std::function<void()> copy_back_;  // null once done
};

}  // namespace dpx::detail
