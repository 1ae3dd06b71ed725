// DistributedDataParallel for LibTorch modules: each rank trains on its own slice of the data;
// gradients are averaged across ranks bucket by bucket while backward is still running.
//
//   auto pg = dpx::init_process_group();
//   Net net;                                   // any torch::nn::Module, held the LibTorch way
//   dpx::DistributedDataParallel ddp(net, pg); // checks the model, broadcasts rank 0's state
//   torch::optim::SGD opt(ddp.parameters(), 0.1);
//   auto loss = loss_fn(ddp->forward(x), y);
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

#include "dpx/parallel/ddp_base.h"

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

template <typename ModuleType>
class DistributedDataParallel : public DdpBase {
 public:
  DistributedDataParallel(std::shared_ptr<ModuleType> module, std::shared_ptr<ProcessGroup> pg,
                          DistributedDataParallelOptions options = {})
      : DdpBase(module, std::move(pg), options), module_(std::move(module)) {}
  DistributedDataParallel(const torch::nn::ModuleHolder<ModuleType>& module,
                          std::shared_ptr<ProcessGroup> pg,
                          DistributedDataParallelOptions options = {})
      : DistributedDataParallel(module.ptr(), std::move(pg), options) {}

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
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  // So that `ddp->forward(x)` reads like a LibTorch module holder.
  DistributedDataParallel* operator->() { return this; }

  // The wrapped module: save it, evaluate it, or hand it to code that wants the plain module.
  const std::shared_ptr<ModuleType>& module() const { return module_; }

 private:
  std::shared_ptr<ModuleType> module_;
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
