#include "dpx/data_parallel/data_parallel.h"

#include <torch/cuda.h>

#include <thread>

#include "dpx/data_parallel/scatter_gather.h"
#include "data_parallel/data_parallel_backward.h"
#include "data_parallel/parallel_apply_threads.h"
#include "data_parallel/replicate_detail.h"

namespace dpx::detail {
namespace {

std::vector<torch::Device> choose_devices(const DataParallelOptions& options) {
  if (!options.devices.empty()) {
    return options.devices;
  }
  std::vector<torch::Device> devices;
  if (torch::cuda::is_available()) {
    for (int64_t i = 0; i < static_cast<int64_t>(torch::cuda::device_count()); ++i) {
      devices.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
    }
    return devices;
  }
  TORCH_CHECK(options.cpu_replicas >= 0, "DataParallel: cpu_replicas must be >= 0, got ",
              options.cpu_replicas);
  const int64_t n = options.cpu_replicas > 0
                        ? options.cpu_replicas
                        : std::max<int64_t>(1, std::thread::hardware_concurrency());
  return std::vector<torch::Device>(n, torch::Device(torch::kCPU));
}

void check_devices(const std::vector<torch::Device>& devices) {
  for (const auto& d : devices) {
    TORCH_CHECK(d.is_cpu() || d.is_cuda(), "DataParallel runs on CPU or CUDA devices, got ", d);
    TORCH_CHECK(d.type() == devices.front().type(),
                "DataParallel: devices must be all CPU or all CUDA, got ", devices.front(),
                " and ", d);
    if (d.is_cuda()) {
      TORCH_CHECK(torch::cuda::is_available(), "DataParallel: CUDA device ", d,
                  " requested, but CUDA is not available (this LibTorch build or machine has "
                  "no GPU); use CPU replicas instead");
      TORCH_CHECK(d.has_index(), "DataParallel: give CUDA devices with an index, got ", d);
    }
  }
}

// The leaves each replica's graph grows from (Note [Parallel backward]): its parameters that
// stand for trainable ones, then a fresh leaf for each input chunk whose tensor requires grad
// (cut[k] for the k-th tensor of the arguments), which replaces the chunk in pieces[r].
void add_leaves(const torch::nn::Module& module,
                const std::vector<std::shared_ptr<torch::nn::Module>>& replicas,
                const std::vector<bool>& cut, ReplicaRun& run, std::vector<c10::IValue>& pieces) {
  std::vector<bool> trainable;
  for (const auto& p : module.parameters()) {
    trainable.push_back(p.requires_grad());
    if (p.requires_grad()) {
      run.params.push_back(p);
    }
  }
  run.leaves.resize(pieces.size());
  for (size_t r = 0; r < pieces.size(); ++r) {
    auto params = replicas[r]->parameters();
    for (size_t j = 0; j < params.size(); ++j) {
      if (trainable[j]) {
        run.leaves[r].push_back(params[j]);
      }
    }
    size_t k = 0;
    pieces[r] = map_tensors(pieces[r], [&](const at::Tensor& t) {
      if (!cut[k++]) {
        return t;
      }
      auto leaf = t.detach().requires_grad_(true);
      run.leaves[r].push_back(leaf);
      return leaf;
    });
  }
}

}  // namespace

DataParallelCore::DataParallelCore(std::shared_ptr<torch::nn::Module> module,
                                   const DataParallelOptions& options)
    : module_(std::move(module)),
      devices_(choose_devices(options)),
      output_device_(options.output_device.value_or(devices_.front())),
      dim_(options.dim) {
  TORCH_CHECK(module_, "DataParallel: the module is null");
  check_devices(devices_);
  TORCH_CHECK(options.threads_per_replica >= 0,
              "DataParallel: threads_per_replica must be >= 0, got ",
              options.threads_per_replica);
  const auto replicas = static_cast<int64_t>(devices_.size());
  threads_ = std::make_shared<ReplicaThreads>(options.threads_per_replica > 0
                                                  ? options.threads_per_replica
                                                  : default_threads_per_replica(replicas));
}

DataParallelCore::~DataParallelCore() = default;

int64_t DataParallelCore::threads_per_replica() const { return threads_->threads_per_replica(); }

void DataParallelCore::check_module_device() const {
  auto check = [&](const at::Tensor& t) {
    TORCH_CHECK(t.device() == devices_.front(),
                "module must have its parameters and buffers on device ", devices_.front(),
                " (devices[0]) but found one of them on device: ", t.device());
  };
  for (const auto& p : module_->parameters()) {
    check(p);
  }
  for (const auto& b : module_->buffers()) {
    check(b);
  }
}

// Note [Replica cache]
// PyTorch replicates the module on every forward. Cloning a LibTorch module re-runs its reset(),
// which allocates and randomly initialises every parameter only to overwrite it: as costly as a
// small forward. So the replicas are kept, and each forward points them again at the module's
// current parameters and buffers (sync_replica). A replica is cloned anew when the module's
// parameter, buffer or submodule names change. Plain C++ members are the exception: a replica
// keeps them as they were when it was cloned (reset_replicas() clones again).
void DataParallelCore::prepare_replicas(int64_t n) {
  for (int64_t r = 0; r < n; ++r) {
    if (r == static_cast<int64_t>(replicas_.size())) {
      replicas_.push_back(clone_module(*module_, devices_[r]));
    } else if (!same_structure(*module_, *replicas_[r])) {
      replicas_[r] = clone_module(*module_, devices_[r]);
    }
    sync_replica(*module_, *replicas_[r], devices_[r], /*share_buffers=*/r == 0,
                 ParamLink::kLeaf);
  }
}

void DataParallelCore::reset_replicas() { replicas_.clear(); }

c10::IValue DataParallelCore::forward(const c10::IValue& args, const ReplicaForward& forward) {
  check_module_device();
  if (devices_.size() == 1) {
    return forward(*module_, args);
  }
  const bool grad = at::GradMode::is_enabled();
  ReplicaRun run;
  run.dim = dim_;
  // Inputs that require grad are cut off here; the backward node joins them again.
  std::vector<bool> cut;
  auto detached = map_tensors(args, [&](const at::Tensor& t) {
    cut.push_back(grad && t.requires_grad());
    if (!cut.back()) {
      return t;
    }
    run.inputs.push_back(t);
    return t.detach();
  });
  // No arguments at all: one replica, as PyTorch runs it.
  auto pieces = args.isTuple() && args.toTupleRef().elements().empty()
                    ? std::vector<c10::IValue>{args}
                    : scatter(detached, devices_, dim_);
  const auto n = static_cast<int64_t>(pieces.size());
  prepare_replicas(n);
  run.devices.assign(devices_.begin(), devices_.begin() + n);
  run.one_engine_call = run.devices.front().is_cuda();  // Note [Parallel backward on CUDA]

  if (grad) {
    add_leaves(*module_, replicas_, cut, run, pieces);
  }

  std::vector<c10::IValue> outputs(n);
  threads_->run(run.devices, [&](int64_t r) { outputs[r] = forward(*replicas_[r], pieces[r]); });

  c10::IValue gathered;
  {
    at::NoGradGuard no_grad;  // the backward node stands for the gather
    gathered = gather(outputs, output_device_, dim_);
  }
  if (grad) {
    run.outputs.resize(n);
    for (int64_t r = 0; r < n; ++r) {
      for_each_tensor(outputs[r], [&](const at::Tensor& t) { run.outputs[r].push_back(t); });
    }
    attach_parallel_backward(threads_, std::move(run), gathered);
  }
  return gathered;
}

}  // namespace dpx::detail
