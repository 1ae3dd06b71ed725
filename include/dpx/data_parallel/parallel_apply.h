// Runs replicas of a module at once, one thread each, as torch.nn.parallel.parallel_apply.
#pragma once

#include <torch/torch.h>

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dpx/errors.h"

namespace dpx {

struct ParallelApplyOptions {
  // The device of each replica (names it in errors; on CUDA, the current device of its thread).
  // Empty: the device of each replica's first parameter or buffer, else CPU.
  std::vector<torch::Device> devices;
  // Intra-op (OpenMP) threads of each replica's thread; 0: hardware threads / replicas, at least 1.
  // See docs/data_parallel.md ("Threads") for why this is per thread rather than at::set_num_threads.
  int64_t threads_per_replica = 0;
};

namespace detail {

// Runs task(i) for i in [0, n) at once on fresh threads (see ReplicaThreads for DataParallel's
// persistent ones), under the caller's thread-local state (grad mode, inference mode, ...).
// The failure of the lowest-numbered replica is rethrown as ReplicaError.
void run_replicas(int64_t n, const std::vector<torch::Device>& devices, int64_t threads_per_replica,
                  const std::function<void(int64_t)>& task);

std::vector<torch::Device> replica_devices(
    const std::vector<std::shared_ptr<torch::nn::Module>>& replicas,
    const std::vector<torch::Device>& devices);

}  // namespace detail

using ReplicaForward =
    std::function<c10::IValue(torch::nn::Module& replica, const c10::IValue& input)>;

// outputs[i] = forward(*replicas[i], inputs[i]), all i at once.
std::vector<c10::IValue> parallel_apply(
    const std::vector<std::shared_ptr<torch::nn::Module>>& replicas,
    const std::vector<c10::IValue>& inputs, const ReplicaForward& forward,
    const ParallelApplyOptions& options = {});

// Typed form: outputs[i] = replicas[i]->forward(inputs[i]).
template <typename ModulePtr, typename Input>
auto parallel_apply(const std::vector<ModulePtr>& replicas, const std::vector<Input>& inputs,
                    const ParallelApplyOptions& options = {})
    -> std::vector<decltype(replicas[0]->forward(inputs[0]))> {
  TORCH_CHECK(replicas.size() == inputs.size(), "parallel_apply: ", replicas.size(),
              " replicas but ", inputs.size(), " inputs");
  using Output = decltype(replicas[0]->forward(inputs[0]));
  std::vector<std::shared_ptr<torch::nn::Module>> modules(replicas.begin(), replicas.end());
  auto devices = detail::replica_devices(modules, options.devices);
  std::vector<c10::optional<Output>> outputs(replicas.size());
  detail::run_replicas(static_cast<int64_t>(replicas.size()), devices, options.threads_per_replica,
                       [&](int64_t i) { outputs[i] = replicas[i]->forward(inputs[i]); });
  std::vector<Output> result;
  for (auto& out : outputs) {
    result.push_back(std::move(*out));
  }
  return result;
}

}  // namespace dpx
