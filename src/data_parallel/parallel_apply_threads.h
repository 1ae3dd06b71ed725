// The threads replicas run on. DataParallel keeps one set for its lifetime so that each thread's
// intra-op setting and ATen's per-thread initialisation happen once (Note [Replica threads]).
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dpx::detail {

// Note [Replica threads]
// at::set_num_threads() is process-wide: it stores a global count, resizes the shared pthreadpool
// and clears oneDNN's cache. ATen's CPU parallelism is OpenMP here, though, and an OpenMP
// thread's team size (omp_set_num_threads) belongs to that thread alone. So each replica thread
// first lets ATen initialise it (at::get_num_threads(), which would otherwise reset the count on
// the first parallel op), then sets its own team size; the caller's setting is untouched and
// replicas x threads_per_replica stays within the cores. BLAS libraries with a thread pool of
// their own ignore this (Note [BLAS threads] in parallel_apply_blas.h).
// Note [Replica streams]
// A replica runs on the caller's current stream of its device, as PyTorch's parallel_apply runs
// it (torch.cuda.stream(current_stream(device))), not on its thread's default stream: what the
// caller queued before (the input it computed, the scatter's copies) comes first, and what it
// queues after (the gather, its own kernels) comes after, without a host wait. The streams are
// read on the caller's thread; each task makes its device and that stream current (c10's
// device-agnostic stream guard: nothing for the CPU). Note [Thread devices] in
// runtime/cuda/local_device.h says why a thread sets its device at all.

// DataParallel's default intra-op threads per replica: max(1, hardware threads / replicas).
int64_t default_threads_per_replica(int64_t replicas);

class ReplicaThreads {
 public:
  explicit ReplicaThreads(int64_t threads_per_replica);
  ~ReplicaThreads();
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  // Runs task(i) for i in [0, devices.size()) at once, task i on thread i, under the caller's
  // thread-local state, on devices[i] and the caller's current stream there
  // (Note [Replica streams]); returns when all have finished and rethrows the failure of the lowest
  // replica as ReplicaError. Waits without a timeout: the tasks are local computation (a
  // replica's forward or backward), which may legitimately take any time and cannot be lost.
  void run(const std::vector<torch::Device>& devices, const std::function<void(int64_t)>& task);

  int64_t threads_per_replica() const { return threads_per_replica_; }

 private:
  struct Worker;
  void loop(Worker& worker);

  int64_t threads_per_replica_;
  std::mutex run_mutex_;  // one run at a time (a forward and a backward may come from two threads)
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace dpx::detail
