// Issues a group's collectives from one thread of its own, in call order (Note [Checked issue]).
//
// Note [Checked issue]
// The gloo backend compares every collective's descriptor across ranks before Gloo sees its
// data (Note [Consistency] in comm/coordination/consistency.h). That comparison waits for the
// peers, so on the caller's thread it would make allreduce() block until every rank called it:
// a DDP gradient hook would stall backward instead of overlapping with it. So callers only queue
// the collective; the issuer thread checks it and hands it to Gloo, one after the other, and
// the caller's Work follows the one Gloo returns. One thread also keeps the order in which
// c10d numbers (tags) the operations the same on every rank. After a lost peer or a timeout,
// Gloo's connections stay broken, so what is queued behind fails at once with the same type
// (tests/multiproc/gloo_errors_test.cpp), not after another timeout.
#pragma once

#include <c10/core/Device.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "dpx/comm/work.h"

namespace dpx::detail {

class Issuer {
 public:
  // Runs on the issuer thread; returns the Work of what it launched, or throws.
  using Launch = std::function<std::shared_ptr<Work>()>;

  // `name` starts its timeout message: the backend whose collectives it issues. `device` is
  // the group's: the thread makes it current before it issues anything (Note [Thread devices]
  // in runtime/cuda/local_device.h).
  Issuer(std::chrono::milliseconds timeout, std::string where, std::string name = "gloo",
         at::Device device = at::kCPU);
  // Issues what is still queued (each check ends within the timeout), then joins.
  ~Issuer();
  Issuer(const Issuer&) = delete;
  Issuer& operator=(const Issuer&) = delete;

  // A Work that fails with what `launch` throws, else finishes with the Work it returned.
  std::shared_ptr<Work> submit(Launch launch);

 private:
  class IssuedWork;
  struct Task {
    Launch launch;
    std::shared_ptr<IssuedWork> work;
  };

  void run();

  std::chrono::milliseconds timeout_;
  std::string where_;
  std::string name_;
  at::Device device_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dpx::detail
