// A c10d collective's handle (ProcessGroupGloo's, ProcessGroupNCCL's) as dpx's Work: bounded
// waits, and c10d's errors typed by the backend's words (backend_error.h). Each backend adds
// what is its own (gloo: when the collective finished, for the timeline; nccl: stream order).
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>

#include "dpx/comm/work.h"

namespace dpx::detail {

// rethrow_gloo_error, rethrow_nccl_error: `e` as dpx's typed error; never returns.
using RethrowBackendError = void (*)(const std::exception& e, const std::string& where,
                                     const std::string& op, std::chrono::milliseconds timeout);

class C10dWork : public Work {
 public:
  C10dWork(c10::intrusive_ptr<c10d::Work> work, RethrowBackendError rethrow,
           std::chrono::milliseconds timeout, std::string where, const char* op)
      : Work(timeout), work_(std::move(work)), rethrow_(rethrow), where_(std::move(where)),
        op_(op) {}

  // c10d reads a timeout of 0 as "no timeout": a caller whose time is up (the issuer passes what
  // is left of its deadline) would wait forever, so 1 ms is the shortest wait. On nccl, c10d's
  // wait with a timeout blocks until the GPU finished, then makes the current stream wait for
  // the NCCL stream.
  void wait(std::chrono::milliseconds timeout) override {
    try {
      work_->wait(std::max(timeout, std::chrono::milliseconds(1)));
    } catch (const std::exception& e) {
      rethrow_(e, where_, op_, timeout);
    }
  }
  using Work::wait;
  bool is_completed() override { return work_->isCompleted(); }
  std::exception_ptr exception() override { return work_->exception(); }

 protected:
  c10::intrusive_ptr<c10d::Work> work_;
  RethrowBackendError rethrow_;
  std::string where_;
  const char* op_;
};

}  // namespace dpx::detail
