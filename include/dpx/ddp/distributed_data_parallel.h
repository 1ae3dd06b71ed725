// DistributedDataParallel for LibTorch modules: each rank trains on its own slice of the data;
// gradients are averaged across ranks bucket by bucket while backward is still running.
//
//   auto pg = dpx::init_process_group();
//   Net net;                                   // any torch::nn::Module, held the LibTorch way
//   dpx::DistributedDataParallel ddp(net, pg); // checks the model, broadcasts rank 0's state
//   torch::optim::SGD opt(ddp->parameters(), 0.1);
//   auto loss = loss_fn(ddp->forward(x), y);   // or ddp(x)
//   loss.backward();                           // gradients arrive averaged in .grad
//   opt.step();
#pragma once

#include <torch/nn/pimpl.h>

#include <map>
#include <memory>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dpx/ddp/ddp_base.h"

namespace dpx {
namespace detail {

// The tensors of a forward's result, for the unused-parameter search. Results of other types
// contribute none (with find_unused_parameters every parameter then counts as unused).
template <typename T>
void collect_tensors(const T&, std::vector<at::Tensor>&) {}
inline void collect_tensors(const at::Tensor& t, std::vector<at::Tensor>& out) {
  out.push_back(t);
}
template <typename T>
void collect_tensors(const std::vector<T>& v, std::vector<at::Tensor>& out);
template <typename A, typename B>
void collect_tensors(const std::pair<A, B>& p, std::vector<at::Tensor>& out);
template <typename... Ts>
void collect_tensors(const std::tuple<Ts...>& t, std::vector<at::Tensor>& out);
template <typename K, typename V>
void collect_tensors(const std::map<K, V>& m, std::vector<at::Tensor>& out);
template <typename K, typename V>
void collect_tensors(const std::unordered_map<K, V>& m, std::vector<at::Tensor>& out);

template <typename T>
void collect_tensors(const std::vector<T>& v, std::vector<at::Tensor>& out) {
  for (const auto& x : v) collect_tensors(x, out);
}
template <typename A, typename B>
void collect_tensors(const std::pair<A, B>& p, std::vector<at::Tensor>& out) {
  collect_tensors(p.first, out);
  collect_tensors(p.second, out);
}
template <typename... Ts>
void collect_tensors(const std::tuple<Ts...>& t, std::vector<at::Tensor>& out) {
  std::apply([&](const auto&... x) { (collect_tensors(x, out), ...); }, t);
}
template <typename K, typename V>
void collect_tensors(const std::map<K, V>& m, std::vector<at::Tensor>& out) {
  for (const auto& kv : m) collect_tensors(kv.second, out);
}
template <typename K, typename V>
void collect_tensors(const std::unordered_map<K, V>& m, std::vector<at::Tensor>& out) {
  for (const auto& kv : m) collect_tensors(kv.second, out);
}

}  // namespace detail

// The module behind the DistributedDataParallel holder; M is the wrapped module's class (NetImpl
// for a TORCH_MODULE(Net)).
template <typename M>
class DistributedDataParallelImpl : public DdpBase {
 public:
  DistributedDataParallelImpl(std::shared_ptr<M> module, std::shared_ptr<ProcessGroup> pg,
                              DistributedDataParallelOptions options = {})
      : DdpBase(module, std::move(pg), options),
        module_(register_module("module", std::move(module))) {}
  DistributedDataParallelImpl(const torch::nn::ModuleHolder<M>& module,
                              std::shared_ptr<ProcessGroup> pg,
                              DistributedDataParallelOptions options = {})
      : DistributedDataParallelImpl(module.ptr(), std::move(pg), options) {}

  // Forwards any arguments to the wrapped module's forward.
  template <typename... Args>
  auto forward(Args&&... args) {
    pre_forward();
    auto out = module_->forward(std::forward<Args>(args)...);
    std::vector<at::Tensor> tensors;
    detail::collect_tensors(out, tensors);
    post_forward(tensors);
    return out;
  }

  // The wrapped module (PyTorch's DistributedDataParallel.module): save it, evaluate it, or hand
  // it to code that wants the plain module.
  const std::shared_ptr<M>& module() const { return module_; }

 private:
  std::shared_ptr<M> module_;
};

// A torch::nn::ModuleHolder, as TORCH_MODULE makes: `ddp->forward(x)`, `ddp(x)`,
// `ddp->parameters()`, `ddp->no_sync()`; copies share one DDP.
template <typename M>
class DistributedDataParallel : public torch::nn::ModuleHolder<DistributedDataParallelImpl<M>> {
 public:
  using torch::nn::ModuleHolder<DistributedDataParallelImpl<M>>::ModuleHolder;

  // ModuleHolder's own operator() finds forward() by taking its address, which a template
  // forward() does not have; this one calls it directly.
  template <typename... Args>
  auto operator()(Args&&... args) {
    return this->get()->forward(std::forward<Args>(args)...);
  }
};

template <typename M>
DistributedDataParallel(std::shared_ptr<M>, std::shared_ptr<ProcessGroup>)
    -> DistributedDataParallel<M>;
template <typename M>
DistributedDataParallel(std::shared_ptr<M>, std::shared_ptr<ProcessGroup>,
                        DistributedDataParallelOptions) -> DistributedDataParallel<M>;
template <typename M>
DistributedDataParallel(torch::nn::ModuleHolder<M>, std::shared_ptr<ProcessGroup>)
    -> DistributedDataParallel<M>;
template <typename M>
DistributedDataParallel(torch::nn::ModuleHolder<M>, std::shared_ptr<ProcessGroup>,
                        DistributedDataParallelOptions) -> DistributedDataParallel<M>;

}  // namespace dpx
