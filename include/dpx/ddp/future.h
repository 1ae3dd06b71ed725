// The result of a bucket's reduction: a tensor that becomes valid once a collective finished.
// Built on dpx::Work; then() chains a step (e.g. decompression) that runs on the thread that
// waits, after the collective completed. No thread of its own, no polling.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "dpx/comm/work.h"

namespace dpx {

class Future : public std::enable_shared_from_this<Future> {
 public:
  // Already complete with `value`.
  static std::shared_ptr<Future> ready(at::Tensor value);
  // Complete with `value` once `work` finished (the collective writes into `value` in place).
  static std::shared_ptr<Future> from_work(std::shared_ptr<Work> work, at::Tensor value);

  // A future of fn(this->value()); fn runs once, on the first wait of the returned future.
  std::shared_ptr<Future> then(std::function<at::Tensor(const at::Tensor&)> fn);

  // Waits for the value; rethrows the collective's error or throws TimeoutError.
  at::Tensor wait(std::chrono::milliseconds timeout);
  // The value, usable by what the calling thread queues next on its current stream
  // (Work::synchronize): on a host group, a wait with the group's default timeout; on a device
  // group, the host does not wait for the device, as with PyTorch's CUDA futures.
  at::Tensor wait();
  bool is_completed();

 private:
  Future() = default;
  at::Tensor resolve(std::optional<std::chrono::milliseconds> timeout);

  std::mutex mutex_;
  std::shared_ptr<Work> work_;                // null when there is nothing to wait for
  std::shared_ptr<Future> parent_;            // set for then()
  std::function<at::Tensor(const at::Tensor&)> fn_;
  at::Tensor value_;
  bool resolved_ = false;
};

}  // namespace dpx
