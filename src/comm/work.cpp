#include "dpx/comm/work.h"

#include "dpx/errors.h"

namespace dpx {

CompletionWork::CompletionWork(std::chrono::milliseconds default_timeout, std::string where)
    : Work(default_timeout), where_(std::move(where)) {}

std::string Work::timeout_message(const std::string& where, std::chrono::milliseconds timeout) {
  return where + "collective did not finish within " + std::to_string(timeout.count()) +
         " ms; a peer may be stuck or dead. Raise the timeout if the job is just slow, else "
         "check the other ranks' logs.";
}

void CompletionWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [&] { return done_; })) {
    throw TimeoutError(timeout_message(where_, timeout));
  }
  if (error_) {
    std::rethrow_exception(error_);
  }
}

bool CompletionWork::is_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

std::exception_ptr CompletionWork::exception() {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

std::chrono::steady_clock::time_point CompletionWork::finished_at() {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_at_;
}

void CompletionWork::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = std::move(error);
    finished_at_ = std::chrono::steady_clock::now();
  }
  done_cv_.notify_all();
}

}  // namespace dpx
