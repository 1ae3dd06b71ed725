// Converts DataParallel's typed arguments and results to and from c10::IValue trees, the form
// scatter() and gather() work on. Besides what IValue holds natively (tensors, numbers,
// strings, std::tuple, std::vector, c10::Dict, c10::List), std::map and std::unordered_map
// become dicts and c10::optional becomes a value or None.
#pragma once

#include <torch/torch.h>

#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dpx::detail {

template <typename T>
struct IValueConvert {
  static c10::IValue to(const T& value) { return c10::IValue(value); }
  static T from(const c10::IValue& value) { return value.to<T>(); }
};

template <typename T>
c10::IValue to_ivalue(const T& value) {
  return IValueConvert<T>::to(value);
}

template <typename T>
T from_ivalue(const c10::IValue& value) {
  return IValueConvert<T>::from(value);
}

template <>
struct IValueConvert<c10::IValue> {
  static c10::IValue to(const c10::IValue& value) { return value; }
  static c10::IValue from(const c10::IValue& value) { return value; }
};

template <typename... Ts>
struct IValueConvert<std::tuple<Ts...>> {
  static c10::IValue to(const std::tuple<Ts...>& value) {
    return std::apply(
        [](const auto&... e) { return c10::ivalue::Tuple::create({to_ivalue(e)...}); }, value);
  }
  static std::tuple<Ts...> from(const c10::IValue& value) {
    TORCH_CHECK(value.isTuple(), "expected a tuple, got ", value.tagKind());
    const auto& e = value.toTupleRef().elements();
    TORCH_CHECK(e.size() == sizeof...(Ts), "expected a tuple of ", sizeof...(Ts), ", got ",
                e.size(), " elements");
    return unpack(e, std::index_sequence_for<Ts...>{});
  }
  template <typename Elements, size_t... I>
  static std::tuple<Ts...> unpack(const Elements& e, std::index_sequence<I...>) {
    return std::tuple<Ts...>(from_ivalue<Ts>(e[I])...);
  }
};

template <typename A, typename B>
struct IValueConvert<std::pair<A, B>> {
  static c10::IValue to(const std::pair<A, B>& value) {
    return c10::ivalue::Tuple::create({to_ivalue(value.first), to_ivalue(value.second)});
  }
  static std::pair<A, B> from(const c10::IValue& value) {
    auto t = IValueConvert<std::tuple<A, B>>::from(value);
    return {std::get<0>(t), std::get<1>(t)};
  }
};

template <typename T>
struct IValueConvert<std::vector<T>> {
  static c10::IValue to(const std::vector<T>& value) {
    if constexpr (std::is_same_v<T, at::Tensor>) {
      return c10::IValue(value);
    } else {
      c10::impl::GenericList list(c10::AnyType::get());
      for (const auto& e : value) {
        list.push_back(to_ivalue(e));
      }
      return list;
    }
  }
  static std::vector<T> from(const c10::IValue& value) {
    TORCH_CHECK(value.isList(), "expected a list, got ", value.tagKind());
    std::vector<T> out;
    for (const auto& e : value.toListRef()) {
      out.push_back(from_ivalue<T>(e));
    }
    return out;
  }
};

template <typename Map>
struct MapConvert {
  using K = typename Map::key_type;
  using V = typename Map::mapped_type;
  static c10::IValue to(const Map& value) {
    c10::impl::GenericDict dict(c10::getTypePtr<K>(), c10::AnyType::get());
    for (const auto& [k, v] : value) {
      dict.insert(c10::IValue(k), to_ivalue(v));
    }
    return dict;
  }
  static Map from(const c10::IValue& value) {
    TORCH_CHECK(value.isGenericDict(), "expected a dict, got ", value.tagKind());
    Map out;
    for (const auto& entry : value.toGenericDict()) {
      out.emplace(entry.key().to<K>(), from_ivalue<V>(entry.value()));
    }
    return out;
  }
};

template <typename K, typename V>
struct IValueConvert<std::map<K, V>> : MapConvert<std::map<K, V>> {};

template <typename K, typename V>
struct IValueConvert<std::unordered_map<K, V>> : MapConvert<std::unordered_map<K, V>> {};

template <typename T>
struct IValueConvert<c10::optional<T>> {
  static c10::IValue to(const c10::optional<T>& value) {
    return value ? to_ivalue(*value) : c10::IValue();
  }
  static c10::optional<T> from(const c10::IValue& value) {
    if (value.isNone()) {
      return c10::nullopt;
    }
    return from_ivalue<T>(value);
  }
};

}  // namespace dpx::detail
