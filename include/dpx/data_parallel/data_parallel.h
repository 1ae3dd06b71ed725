// DataParallel: one process, the batch split across replicas of the module that run at once in
// threads (CPU replicas here; GPUs on CUDA builds), as torch.nn.DataParallel.
//
//   Net net;                                   // a TORCH_MODULE of any torch::nn::Cloneable
//   dpx::DataParallelOptions options;
//   options.cpu_replicas = 2;
//   dpx::DataParallel dp(net, options);
//   auto loss = torch::nll_loss(dp->forward(images), labels);
//   loss.backward();   // gradients of both replicas summed into net's parameters
//
// Each forward: (1) scatter the arguments' tensors along `dim`; (2) point the replicas at the
// module's current parameters and buffers; (3) run replica i on chunk i in its own thread;
// (4) gather the outputs on the output device. The backward runs the replicas' graphs in
// parallel too, each replica's part in its own thread (docs/data_parallel.md).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "dpx/data_parallel/data_parallel_convert.h"
#include "dpx/data_parallel/parallel_apply.h"

namespace dpx {

struct DataParallelOptions {
  // Where the replicas run; the module must live on devices[0]. Empty: every CUDA device when
  // CUDA is available, else `cpu_replicas` times torch::kCPU.
  std::vector<torch::Device> devices = {};
  // The number of CPU replicas when `devices` is empty and there is no GPU; 0: one per
  // hardware thread (std::thread::hardware_concurrency()).
  int64_t cpu_replicas = 0;
  // Where outputs are gathered; default devices[0].
  c10::optional<torch::Device> output_device = c10::nullopt;
  // The dimension inputs are split and outputs concatenated along.
  int64_t dim = 0;
  // Intra-op (OpenMP) threads in each replica's thread; 0: hardware threads / replicas, at
  // least 1. The caller's own setting (at::set_num_threads) is left alone.
  int64_t threads_per_replica = 0;
};

namespace detail {

class ReplicaThreads;

// The type-erased engine behind DataParallel<M>.
class DataParallelCore {
 public:
  DataParallelCore(std::shared_ptr<torch::nn::Module> module, const DataParallelOptions& options);
  ~DataParallelCore();

  // `args` is a tuple of the forward's arguments; forward(replica, args) calls the replica.
  c10::IValue forward(const c10::IValue& args, const ReplicaForward& forward);

  const std::vector<torch::Device>& devices() const { return devices_; }
  torch::Device output_device() const { return output_device_; }
  int64_t dim() const { return dim_; }
  int64_t threads_per_replica() const;
  // Drops the kept replicas; the next forward clones the module again.
  void reset_replicas();

 private:
  void check_module_device() const;
  void prepare_replicas(int64_t n);

  std::shared_ptr<torch::nn::Module> module_;
  std::vector<torch::Device> devices_;
  torch::Device output_device_;
  int64_t dim_;
  std::shared_ptr<ReplicaThreads> threads_;
  // Kept between forwards, re-pointed at the module's current tensors each time.
  std::vector<std::shared_ptr<torch::nn::Module>> replicas_;
};

}  // namespace detail

// The module behind the DataParallel holder; M is the wrapped module's class (NetImpl for a
// TORCH_MODULE(Net)), a torch::nn::Cloneable. forward() takes the module's own arguments: tensors
// are split along `dim`, also inside tuples, vectors and maps; other values go to every replica.
// The result has the module's result type with its tensors gathered. The wrapped module is this
// module's child "module", so parameters and state_dict keys read "module.*" as in PyTorch.
template <typename M>
class DataParallelImpl : public torch::nn::Module {
 public:
  explicit DataParallelImpl(std::shared_ptr<M> module, const DataParallelOptions& options = {})
      : module_(register_module("module", std::move(module))), core_(module_, options) {}
  explicit DataParallelImpl(const torch::nn::ModuleHolder<M>& module,
                            const DataParallelOptions& options = {})
      : DataParallelImpl(module.ptr(), options) {}

  template <typename... Args>
  auto forward(Args&&... args) {
    using Result = decltype(std::declval<M&>().forward(std::forward<Args>(args)...));
    static_assert(!std::is_void_v<Result>, "DataParallel needs a forward() that returns a value");
    auto packed = c10::ivalue::Tuple::create({detail::to_ivalue<std::decay_t<Args>>(args)...});
    auto call = [](torch::nn::Module& replica, const c10::IValue& in) -> c10::IValue {
      return detail::to_ivalue(
          invoke<Args...>(dynamic_cast<M&>(replica), in, std::index_sequence_for<Args...>{}));
    };
    return detail::from_ivalue<std::decay_t<Result>>(core_.forward(packed, call));
  }

  // The wrapped module (PyTorch's DataParallel.module).
  const std::shared_ptr<M>& module() const { return module_; }
  const std::vector<torch::Device>& devices() const { return core_.devices(); }
  torch::Device output_device() const { return core_.output_device(); }
  int64_t threads_per_replica() const { return core_.threads_per_replica(); }
  // Replicas are kept between forwards and re-pointed at the module's tensors each time; plain
  // C++ members of the module changed since they were cloned need this to reach them.
  void reset_replicas() { core_.reset_replicas(); }

 private:
  template <typename... Args, size_t... I>
  static auto invoke(M& replica, const c10::IValue& in, std::index_sequence<I...>) {
    const auto& e = in.toTupleRef().elements();
    return replica.forward(detail::from_ivalue<std::decay_t<Args>>(e[I])...);
  }

  std::shared_ptr<M> module_;
  detail::DataParallelCore core_;
};

// A torch::nn::ModuleHolder, as TORCH_MODULE makes: `dp->forward(x)`, `dp(x)`,
// `dp->parameters()`; copies share one DataParallel.
template <typename M>
class DataParallel : public torch::nn::ModuleHolder<DataParallelImpl<M>> {
 public:
  using torch::nn::ModuleHolder<DataParallelImpl<M>>::ModuleHolder;

  // ModuleHolder's own operator() finds forward() by taking its address, which a template
  // forward() does not have; this one calls it directly.
  template <typename... Args>
  auto operator()(Args&&... args) {
    return this->get()->forward(std::forward<Args>(args)...);
  }
};

template <typename M>
DataParallel(std::shared_ptr<M>) -> DataParallel<M>;
template <typename M>
DataParallel(std::shared_ptr<M>, DataParallelOptions) -> DataParallel<M>;
template <typename M>
DataParallel(torch::nn::ModuleHolder<M>) -> DataParallel<M>;
template <typename M>
DataParallel(torch::nn::ModuleHolder<M>, DataParallelOptions) -> DataParallel<M>;

}  // namespace dpx
