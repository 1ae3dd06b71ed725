// The tensors inside a forward's arguments or result (a tensor, or vectors, pairs, tuples and
// maps of them), read in a fixed order and replaced in the same order. fully_shard uses them to
// cast a unit's inputs and outputs and to hook its autograd graph; other types pass through.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <map>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace dpx::detail {

template <typename T>
struct TensorTree {  // anything else: no tensors, passed through
  static void collect(const T&, std::vector<at::Tensor>&) {}
  template <typename U>
  static U&& replace(U&& x, const std::vector<at::Tensor>&, std::size_t&) {
    return std::forward<U>(x);
  }
};

template <>
struct TensorTree<at::Tensor> {
  static void collect(const at::Tensor& t, std::vector<at::Tensor>& out) { out.push_back(t); }
  template <typename U>
  static at::Tensor replace(U&&, const std::vector<at::Tensor>& with, std::size_t& next) {
    return with[next++];
  }
};

template <typename T>
struct TensorTree<std::vector<T>> {
  static void collect(const std::vector<T>& v, std::vector<at::Tensor>& out) {
    for (const auto& x : v) TensorTree<T>::collect(x, out);
  }
  template <typename U>
  static std::vector<T> replace(U&& v, const std::vector<at::Tensor>& with, std::size_t& next) {
    std::vector<T> result;
    result.reserve(v.size());
    for (const auto& x : v) result.push_back(TensorTree<T>::replace(x, with, next));
    return result;
  }
};

template <typename A, typename B>
struct TensorTree<std::pair<A, B>> {
  static void collect(const std::pair<A, B>& p, std::vector<at::Tensor>& out) {
    TensorTree<A>::collect(p.first, out);
    TensorTree<B>::collect(p.second, out);
  }
  template <typename U>
  static std::pair<A, B> replace(U&& p, const std::vector<at::Tensor>& with, std::size_t& next) {
    A first = TensorTree<A>::replace(p.first, with, next);  // in order: first, then second
    return {std::move(first), TensorTree<B>::replace(p.second, with, next)};
  }
};

template <typename... Ts>
struct TensorTree<std::tuple<Ts...>> {
  static void collect(const std::tuple<Ts...>& t, std::vector<at::Tensor>& out) {
    std::apply([&](const auto&... x) { (TensorTree<Ts>::collect(x, out), ...); }, t);
  }
  template <typename U>
  static std::tuple<Ts...> replace(U&& t, const std::vector<at::Tensor>& with,
                                   std::size_t& next) {
    // A braced list evaluates its elements left to right, so the order matches collect().
    return std::apply(
        [&](const auto&... x) { return std::tuple<Ts...>{TensorTree<Ts>::replace(x, with, next)...}; },
        t);
  }
};

template <typename K, typename V>
struct TensorTree<std::map<K, V>> {
  static void collect(const std::map<K, V>& m, std::vector<at::Tensor>& out) {
    for (const auto& kv : m) TensorTree<V>::collect(kv.second, out);
  }
  template <typename U>
  static std::map<K, V> replace(U&& m, const std::vector<at::Tensor>& with, std::size_t& next) {
    std::map<K, V> result;
    for (const auto& kv : m) result.emplace(kv.first, TensorTree<V>::replace(kv.second, with, next));
    return result;
  }
};

template <typename T>
using TreeOf = TensorTree<std::remove_cv_t<std::remove_reference_t<T>>>;

// The tensors of `x`, in order.
template <typename T>
void collect_tree(const T& x, std::vector<at::Tensor>& out) {
  TreeOf<T>::collect(x, out);
}

// `x` with its tensors taken from `with`, starting at `next` (advanced past them).
template <typename T>
decltype(auto) replace_tree(T&& x, const std::vector<at::Tensor>& with, std::size_t& next) {
  return TreeOf<T>::replace(std::forward<T>(x), with, next);
}

}  // namespace dpx::detail
