#include "dpx/data_parallel/parallel_apply.h"

#include <omp.h>

#include <ATen/ThreadLocalState.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <thread>

#include "data_parallel/parallel_apply_blas.h"
#include "data_parallel/parallel_apply_threads.h"

namespace dpx {
namespace {

thread_local const detail::ReplicaThreads* current_threads = nullptr;

// The calling thread's current stream on each device; none for the CPU.
std::vector<c10::optional<c10::Stream>> current_streams(
    const std::vector<torch::Device>& devices) {
  std::vector<c10::optional<c10::Stream>> streams(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!devices[i].is_cpu()) {
      streams[i] = c10::impl::getDeviceGuardImpl(devices[i].type())->getStream(devices[i]);
    }
  }
  return streams;
}

}  // namespace

namespace detail {

struct ReplicaThreads::Worker {
  std::thread thread;
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable started;
  std::function<void()> job;
  bool ready = false;  // its thread-level setup is done
  bool stop = false;
};

ReplicaThreads::ReplicaThreads(int64_t threads_per_replica)
    : threads_per_replica_(threads_per_replica) {
  TORCH_CHECK(threads_per_replica > 0, "threads_per_replica must be positive, got ",
              threads_per_replica);
}

ReplicaThreads::~ReplicaThreads() {
  for (auto& worker : workers_) {
    {
      std::lock_guard<std::mutex> lock(worker->mutex);
      worker->stop = true;
    }
    worker->wake.notify_one();
    worker->thread.join();
  }
}

void ReplicaThreads::loop(Worker& worker) {
  at::get_num_threads();  // ATen's lazy per-thread initialisation first (Note [Replica threads])
  omp_set_num_threads(static_cast<int>(threads_per_replica_));
  current_threads = this;
  {
    std::lock_guard<std::mutex> lock(worker.mutex);
    worker.ready = true;
  }
  worker.started.notify_one();
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(worker.mutex);
      worker.wake.wait(lock, [&] { return worker.job || worker.stop; });
      if (!worker.job) {
        return;
      }
      job = std::move(worker.job);
      worker.job = nullptr;
    }
    job();
  }
}

void ReplicaThreads::run(const std::vector<torch::Device>& devices,
                         const std::function<void(int64_t)>& task) {
  TORCH_CHECK(current_threads != this,
              "a replica called back into the DataParallel that runs it (recursive forward)");
  std::lock_guard<std::mutex> run_lock(run_mutex_);
  const auto n = static_cast<int64_t>(devices.size());
  // All threads finish their setup before any runs a task: ATen's per-thread initialisation
  // touches process-wide state (the pthreadpool, oneDNN's cache) that a running task uses.
  while (static_cast<int64_t>(workers_.size()) < n) {
    workers_.push_back(std::make_unique<Worker>());
    Worker& w = *workers_.back();
    w.thread = std::thread([this, &w] { loop(w); });
    std::unique_lock<std::mutex> lock(w.mutex);
    w.started.wait(lock, [&] { return w.ready; });
  }

  const at::ThreadLocalState state;
  const auto streams = current_streams(devices);  // Note [Replica streams]
  ScopedBlasThreads blas(static_cast<int>(threads_per_replica_));  // Note [BLAS threads]
  std::mutex done_mutex;
  std::condition_variable done;
  int64_t remaining = n;
  std::vector<std::exception_ptr> errors(n);
  for (int64_t i = 0; i < n; ++i) {
    Worker& w = *workers_[i];
    {
      std::lock_guard<std::mutex> lock(w.mutex);
      w.job = [&, i] {
        try {
          at::ThreadLocalStateGuard tls(state);
          // The replica's device and the caller's stream on it are current in its thread, as
          // in PyTorch; nothing to set on CPU.
          c10::OptionalStreamGuard stream_guard;
          if (streams[i]) {
            stream_guard.reset_stream(*streams[i]);
          }
          task(i);
        } catch (...) {
          errors[i] = std::current_exception();
        }
        std::lock_guard<std::mutex> lock(done_mutex);
        if (--remaining == 0) {
          done.notify_one();
        }
      };
    }
    w.wake.notify_one();
  }
  std::unique_lock<std::mutex> lock(done_mutex);
  done.wait(lock, [&] { return remaining == 0; });
  for (int64_t i = 0; i < n; ++i) {
    if (errors[i]) {
      throw ReplicaError(i, devices[i], errors[i]);
    }
  }
}

int64_t default_threads_per_replica(int64_t replicas) {
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  return std::max<int64_t>(1, cores / std::max<int64_t>(1, replicas));
}

void run_replicas(int64_t n, const std::vector<torch::Device>& devices, int64_t threads_per_replica,
                  const std::function<void(int64_t)>& task) {
  TORCH_CHECK(static_cast<int64_t>(devices.size()) == n, "parallel_apply: ", n,
              " replicas but ", devices.size(), " devices");
  if (n == 0) {
    return;
  }
  ReplicaThreads threads(threads_per_replica > 0 ? threads_per_replica
                                                 : default_threads_per_replica(n));
  threads.run(devices, task);
}

std::vector<torch::Device> replica_devices(
    const std::vector<std::shared_ptr<torch::nn::Module>>& replicas,
    const std::vector<torch::Device>& devices) {
  if (!devices.empty()) {
    return devices;
  }
  std::vector<torch::Device> found;
  for (const auto& replica : replicas) {
    TORCH_CHECK(replica, "parallel_apply: a replica is null");
    auto params = replica->parameters();
    auto buffers = replica->buffers();
    found.push_back(!params.empty()    ? params.front().device()
                    : !buffers.empty() ? buffers.front().device()
                                       : torch::Device(torch::kCPU));
  }
  return found;
}

}  // namespace detail

std::vector<c10::IValue> parallel_apply(
    const std::vector<std::shared_ptr<torch::nn::Module>>& replicas,
    const std::vector<c10::IValue>& inputs, const ReplicaForward& forward,
    const ParallelApplyOptions& options) {
  TORCH_CHECK(replicas.size() == inputs.size(), "parallel_apply: ", replicas.size(),
              " replicas but ", inputs.size(), " inputs");
  auto devices = detail::replica_devices(replicas, options.devices);
  std::vector<c10::IValue> outputs(replicas.size());
  detail::run_replicas(static_cast<int64_t>(replicas.size()), devices,
                       options.threads_per_replica,
                       [&](int64_t i) { outputs[i] = forward(*replicas[i], inputs[i]); });
  return outputs;
}

}  // namespace dpx
