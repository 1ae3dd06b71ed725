// How fully_shard runs a torch::nn::Sequential (Note [Sequential roots]): the handle walks the
// Sequential's entries itself and calls each unit through fully_shard's steps, as FSDP2's
// forward hooks do in Python, since a Sequential's own forward would call its units directly,
// on their shards.
//
// Note [Sequential roots]
// LibTorch has no forward hooks and keeps a Sequential's entries private, but its iterators
// reach them. fully_shard applied to a module with Sequentials inside (or to one) keeps each
// Sequential's entries that hold parameters aside and puts a guard in their place, so that the
// Sequential's own forward, reached around the handle (seq(x) instead of model(x)), fails at its
// first sharded entry with a message that names it, not in a kernel with a shape error. The
// handle's walk calls the entries kept aside. Parameter names do not change (they come from the
// registered children, which stay), so state dicts stay Python's; seq[i] and seq->ptr(i) give
// the guard of a sharded entry (its parameters are reachable through named_children()).
#pragma once

#include <c10/util/Exception.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>

#include <array>
#include <memory>
#include <utility>
#include <vector>

#include "dpx/fsdp/tensor_tree.h"

namespace dpx::detail {

class FsdpUnit;

std::shared_ptr<FsdpUnit> fsdp_unit_of(const torch::nn::Module& module);
std::vector<at::Tensor> fsdp_pre_forward(FsdpUnit& unit, std::vector<at::Tensor> inputs);
std::vector<at::Tensor> fsdp_post_forward(FsdpUnit& unit, std::vector<at::Tensor> outputs);
// The unit's forward threw `error` (null: not a c10::Error): its parameters go back to their
// shards; for a root, an error that a unit called around its handle explains is thrown instead.
void fsdp_forward_failed(FsdpUnit& unit, const c10::Error* error);

// A Sequential's value between entries: its tensor, when it holds one.
template <>
struct TensorTree<torch::nn::AnyValue> {
  static void collect(const torch::nn::AnyValue& v, std::vector<at::Tensor>& out) {
    if (auto* t = const_cast<torch::nn::AnyValue&>(v).try_get<at::Tensor>()) out.push_back(*t);
  }
  template <typename U>
  static torch::nn::AnyValue replace(U&& v, const std::vector<at::Tensor>& with,
                                     std::size_t& next) {
    if (const_cast<torch::nn::AnyValue&>(v).template try_get<at::Tensor>()) {
      return torch::nn::AnyValue(with[next++]);
    }
    return torch::nn::AnyValue(std::move(v));
  }
};

template <typename T>
std::size_t count_tensors(const T& x) {
  std::vector<at::Tensor> tensors;
  collect_tree(x, tensors);
  return tensors.size();
}

template <typename T>
decltype(auto) replace_tree_at(T&& x, const std::vector<at::Tensor>& with, std::size_t start) {
  return replace_tree(std::forward<T>(x), with, start);
}

// call(args...) with each argument's tensors taken from `inputs`, from its start on.
template <typename Call, std::size_t N, std::size_t... I, typename... Args>
auto call_replaced(Call& call, const std::vector<at::Tensor>& inputs,
                   const std::array<std::size_t, N>& starts, std::index_sequence<I...>,
                   Args&&... args) {
  return call(replace_tree_at(std::forward<Args>(args), inputs, starts[I])...);
}

// fully_shard's steps around `call(args...)`, the forward of `unit`'s module
// (Note [Unit iteration] in src/fsdp/fsdp_unit.h): its tensors in, the call, its tensors out.
template <typename Call, typename... Args>
auto run_unit(FsdpUnit& unit, Call&& call, Args&&... args) {
  std::vector<at::Tensor> inputs;
  (collect_tree(args, inputs), ...);
  inputs = fsdp_pre_forward(unit, std::move(inputs));
  try {
    // Each argument's tensors start where the previous argument's end.
    const std::array<std::size_t, sizeof...(Args)> counts{count_tensors(args)...};
    std::array<std::size_t, sizeof...(Args)> starts{};
    for (std::size_t i = 1; i < counts.size(); ++i) starts[i] = starts[i - 1] + counts[i - 1];
    auto out = call_replaced(call, inputs, starts, std::index_sequence_for<Args...>{},
                             std::forward<Args>(args)...);
    std::vector<at::Tensor> outputs;
    collect_tree(out, outputs);
    outputs = fsdp_post_forward(unit, std::move(outputs));
    std::size_t next = 0;
    return decltype(out)(replace_tree(std::move(out), outputs, next));
  } catch (const c10::Error& e) {
    fsdp_forward_failed(unit, &e);
    throw;
  } catch (...) {
    fsdp_forward_failed(unit, nullptr);
    throw;
  }
}

// Entry i of `seq` as the walk calls it: the one kept aside for a guard, else the entry itself.
torch::nn::AnyModule& sequential_entry(torch::nn::SequentialImpl& seq, std::size_t i);
// Keeps aside and guards the entries with parameters of every Sequential in `module`'s tree
// (Note [Sequential roots]).
void guard_sequentials(torch::nn::Module& module);

template <typename... Args>
torch::nn::AnyValue walk_sequential(torch::nn::SequentialImpl& seq, Args&&... args);

// One entry of a walk: through its unit's steps when it is a unit; a Sequential is walked in
// turn, so units inside it are reached too.
template <typename... Args>
torch::nn::AnyValue call_entry(torch::nn::AnyModule& entry, Args&&... args) {
  const std::shared_ptr<torch::nn::Module> module = entry.ptr();
  auto* inner = dynamic_cast<torch::nn::SequentialImpl*>(module.get());
  auto call = [&](auto&&... a) {
    if (inner) return walk_sequential(*inner, std::forward<decltype(a)>(a)...);
    return entry.any_forward(std::forward<decltype(a)>(a)...);
  };
  if (auto unit = fsdp_unit_of(*module)) return run_unit(*unit, call, std::forward<Args>(args)...);
  return call(std::forward<Args>(args)...);
}

template <typename... Args>
torch::nn::AnyValue walk_sequential(torch::nn::SequentialImpl& seq, Args&&... args) {
  TORCH_CHECK(seq.size() > 0, "Cannot call forward() on an empty Sequential");
  torch::nn::AnyValue value = call_entry(sequential_entry(seq, 0), std::forward<Args>(args)...);
  for (std::size_t i = 1; i < seq.size(); ++i) {
    value = call_entry(sequential_entry(seq, i), std::move(value));
  }
  return value;
}

// A Sequential handle's forward: the walk, as the root's unit when it is one.
template <typename... Args>
at::Tensor sequential_forward(torch::nn::SequentialImpl& seq, Args&&... args) {
  auto walk = [&](auto&&... a) { return walk_sequential(seq, std::forward<decltype(a)>(a)...); };
  auto unit = fsdp_unit_of(seq);
  torch::nn::AnyValue out = unit ? run_unit(*unit, walk, std::forward<Args>(args)...)
                                 : walk(std::forward<Args>(args)...);
  auto* t = out.try_get<at::Tensor>();
  TORCH_CHECK(t, "fully_shard: the Sequential's last entry returned a ", out.type_info().name(),
              ", not a tensor; dpx's handle of a Sequential returns a tensor");
  return *t;
}

}  // namespace dpx::detail
