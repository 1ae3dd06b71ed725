// One collective of an mpi group on the MPI thread, and the Work its caller holds. Included only
// by the mpi backend's files, inside #if DPX_WITH_MPI.
//
// Note [MPI collective steps]
// Every rank must start a communicator's collectives in one order, and MPI itself neither
// checks that the ranks agree nor ever times out. So each collective goes through these steps
// on the MPI thread (Note [MPI thread] in runtime.h):
//  1. Taken in, in call order: if the group has failed, it fails at once with that error. Else
//     it gets the group's next number and, with more than one rank, starts an MPI_Iallgather of
//     its descriptor (Note [Consistency]) on the group's check communicator.
//  2. When every descriptor is in and it is this collective's turn on the data communicator
//     (the collectives before it started their data step, or were refused), it compares them:
//     every rank sees the same descriptors, so on a difference all raise MismatchError, none
//     moves data, and the turn passes (the group stays usable). Else it starts its data step
//     (MPI_Iallreduce, MPI_Ibcast, ...), and the next collective's turn comes.
//  3. When MPI completes the data step: what follows it on this thread (avg's division), then
//     the Work completes.
// Two communicators, because the all-gathers of step 1 run ahead of the data steps (a bucket's
// check overlaps the previous bucket's data), and each communicator then still sees one order,
// the call order, on every rank.
// The group's timeout runs from the call: past it, the Work fails with TimeoutError naming the
// collective and the step it waited in, and the group fails too (MPI cannot cancel a
// collective, so what is queued behind it could never run): every collective queued or issued
// later fails at once with the same error. MPI keeps writing into the buffers of a collective
// it has started until its request completes, so the task keeps its tensors and lingers (polled
// every millisecond) until then, or until MPI_Finalize.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/backends/mpi/runtime.h"
#include "comm/coordination/consistency.h"
#include "dpx/comm/work.h"

namespace dpx::detail::mpi {

// A group's state shared by its collectives.
struct Channel {
  int rank = 0;
  int size = 1;
  std::string where;
  std::chrono::milliseconds timeout{0};
  // MPI thread only.
  MPI_Comm data = MPI_COMM_NULL;   // the collectives' data
  MPI_Comm check = MPI_COMM_NULL;  // their descriptors (step 1)
  bool closed = false;             // the group was destroyed; its communicators are freed
  std::uint32_t taken = 0;         // collectives taken in so far (the next one's number)
  std::uint32_t turn = 0;          // the number of the collective whose data step goes next
  // Any thread: the error the group failed with (its first timeout), under `mutex`.
  std::mutex mutex;
  std::exception_ptr failed;
  std::exception_ptr failure();
};

// Starts a collective's data step (returns MPI's error code), and what follows it.
struct DataStep {
  std::function<int(MPI_Comm comm, MPI_Request* request)> start;
  std::function<void()> finish;  // optional
};

class MpiWork : public Work {
 public:
  MpiWork(std::shared_ptr<const Channel> channel, const CollectiveDescriptor& desc);

  void wait(std::chrono::milliseconds timeout) override;
  using Work::wait;
  bool is_completed() override { return done_.load(std::memory_order_acquire); }
  std::exception_ptr exception() override;
  std::chrono::steady_clock::time_point finished_at() override;

  // MPI thread.
  void number(std::uint32_t seq);
  void complete(std::exception_ptr error);
  // "allreduce(sum) on 10 Float as collective #3" (no number before step 1).
  std::string describe();

 private:
  std::shared_ptr<const Channel> channel_;
  CollectiveDescriptor desc_;
  bool numbered_ = false;
  std::atomic<bool> done_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point finished_at_;
};

class Collective : public Task {
 public:
  Collective(std::shared_ptr<Channel> channel, const CollectiveDescriptor& desc, DataStep step,
             std::shared_ptr<MpiWork> work);
  State poll() override;

 private:
  enum class Step { kNew, kCheck, kTurn, kData, kLinger };
  State take_in();
  State fail(std::exception_ptr error);
  State time_out(const char* waiting_for);
  std::exception_ptr compare();
  std::exception_ptr mpi_error(int rc, const char* call);

  std::shared_ptr<Channel> ch_;
  CollectiveDescriptor mine_;
  DataStep step_;
  std::shared_ptr<MpiWork> work_;
  std::chrono::steady_clock::time_point deadline_;
  Step at_ = Step::kNew;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::vector<CollectiveDescriptor> all_;  // every rank's descriptor (step 1)
};

// A set-up step: requests that complete `work` (CompletionWork), or linger past `deadline`.
// `target` is what MPI writes into when they complete (the channel whose communicators
// MPI_Comm_idup makes): kept alive until then, even when the caller gave up on the group.
class SetupTask : public Task {
 public:
  SetupTask(std::vector<MPI_Request> requests, std::chrono::steady_clock::time_point deadline,
            std::shared_ptr<CompletionWork> work, std::shared_ptr<void> target)
      : requests_(std::move(requests)), deadline_(deadline), work_(std::move(work)),
        target_(std::move(target)) {}
  State poll() override;

 private:
  std::vector<MPI_Request> requests_;
  std::chrono::steady_clock::time_point deadline_;
  std::shared_ptr<CompletionWork> work_;
  std::shared_ptr<void> target_;
  bool answered_ = false;
};

}  // namespace dpx::detail::mpi
