#include "dpx/ddp/future.h"

namespace dpx {

std::shared_ptr<Future> Future::ready(at::Tensor value) {
  std::shared_ptr<Future> f(new Future());
  f->value_ = std::move(value);
  f->resolved_ = true;
  return f;
}

std::shared_ptr<Future> Future::from_work(std::shared_ptr<Work> work, at::Tensor value) {
  std::shared_ptr<Future> f(new Future());
  f->work_ = std::move(work);
  f->value_ = std::move(value);
  return f;
}

std::shared_ptr<Future> Future::then(std::function<at::Tensor(const at::Tensor&)> fn) {
  std::shared_ptr<Future> f(new Future());
  f->parent_ = shared_from_this();
  f->fn_ = std::move(fn);
  return f;
}

at::Tensor Future::wait() { return resolve(std::nullopt); }

at::Tensor Future::wait(std::chrono::milliseconds timeout) { return resolve(timeout); }

at::Tensor Future::resolve(std::optional<std::chrono::milliseconds> timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (resolved_) return value_;
  if (parent_) {
    value_ = fn_(parent_->resolve(timeout));
    parent_.reset();
    fn_ = nullptr;
  } else if (work_) {
    if (timeout) {
      work_->wait(*timeout);
    } else {
      work_->synchronize();
    }
    work_.reset();
  }
  resolved_ = true;
  return value_;
}

bool Future::is_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (resolved_) return true;
  if (parent_) return parent_->is_completed();
  return !work_ || work_->is_completed();
}

}  // namespace dpx
