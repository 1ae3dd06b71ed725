#include "dpx/data_parallel/scatter_gather.h"

#include <algorithm>

namespace dpx {
namespace {

using c10::IValue;
using Pieces = std::vector<IValue>;

// Transposes parts[element][device] into per-device lists, truncated to the shortest part
// (PyTorch zips the parts, so one short split limits them all).
std::vector<std::vector<IValue>> zip_parts(const std::vector<Pieces>& parts, size_t devices) {
  size_t n = devices;
  for (const auto& p : parts) {
    n = std::min(n, p.size());
  }
  std::vector<std::vector<IValue>> zipped(n);
  for (size_t i = 0; i < n; ++i) {
    zipped[i].reserve(parts.size());
    for (const auto& p : parts) {
      zipped[i].push_back(p[i]);
    }
  }
  return zipped;
}

Pieces scatter_tree(const IValue& value, const std::vector<torch::Device>& devices, int64_t dim) {
  if (value.isTensor() && value.toTensor().defined()) {
    auto chunks = value.toTensor().chunk(static_cast<int64_t>(devices.size()), dim);
    Pieces out;
    for (size_t i = 0; i < chunks.size(); ++i) {
      out.emplace_back(chunks[i].to(devices[i]));
    }
    return out;
  }
  if (value.isTuple() || value.isList()) {
    std::vector<Pieces> parts;
    for (const auto& element : value.isTuple() ? value.toTupleRef().elements().vec()
                                                : value.toListRef().vec()) {
      parts.push_back(scatter_tree(element, devices, dim));
    }
    Pieces out;
    for (auto& elements : zip_parts(parts, devices.size())) {
      if (value.isTuple()) {
        out.emplace_back(c10::ivalue::Tuple::create(std::move(elements)));
      } else {
        c10::impl::GenericList list(value.toList().elementType());
        for (auto& e : elements) {
          list.push_back(std::move(e));
        }
        out.emplace_back(std::move(list));
      }
    }
    return out;
  }
  if (value.isGenericDict()) {
    auto dict = value.toGenericDict();
    std::vector<IValue> keys;
    std::vector<Pieces> parts;
    for (const auto& entry : dict) {
      keys.push_back(entry.key());
      parts.push_back(scatter_tree(entry.value(), devices, dim));
    }
    Pieces out;
    for (auto& values : zip_parts(parts, devices.size())) {
      c10::impl::GenericDict piece(dict.keyType(), dict.valueType());
      for (size_t k = 0; k < keys.size(); ++k) {
        piece.insert(keys[k], std::move(values[k]));
      }
      out.emplace_back(std::move(piece));
    }
    return out;
  }
  return Pieces(devices.size(), value);
}

IValue gather_tensors(const std::vector<IValue>& outputs, torch::Device device, int64_t dim) {
  std::vector<at::Tensor> tensors;
  bool all_scalars = true;
  for (const auto& out : outputs) {
    TORCH_CHECK(out.isTensor() && out.toTensor().defined(),
                "gather: replica outputs differ in structure: a tensor in one replica, ",
                out.tagKind(), " in another");
    tensors.push_back(out.toTensor().to(device));
    all_scalars = all_scalars && tensors.back().dim() == 0;
  }
  if (all_scalars && dim == 0) {
    TORCH_WARN_ONCE("Was asked to gather along dimension 0, but all input tensors were scalars; "
                    "will instead unsqueeze and return a vector.");
    for (auto& t : tensors) {
      t = t.unsqueeze(0);
    }
  }
  return torch::cat(tensors, dim);
}

IValue gather_tree(const std::vector<IValue>& outputs, torch::Device device, int64_t dim);

// Every replica's value is a `first`-like tuple or list: element k of the result gathers
// element k of each.
IValue gather_sequences(const std::vector<IValue>& outputs, torch::Device device, int64_t dim) {
  const IValue& first = outputs.front();
  const bool tuple = first.isTuple();
  auto elements_of = [&](const IValue& v) {
    return tuple ? v.toTupleRef().elements().vec() : v.toListRef().vec();
  };
  const size_t size = elements_of(first).size();
  std::vector<std::vector<IValue>> columns(size);
  for (const auto& out : outputs) {
    auto elements = elements_of(out);
    TORCH_CHECK(elements.size() == size, "gather: replica outputs differ in structure: ",
                "sequences of length ", size, " and ", elements.size());
    for (size_t k = 0; k < size; ++k) {
      columns[k].push_back(std::move(elements[k]));
    }
  }
  std::vector<IValue> gathered;
  for (const auto& column : columns) {
    gathered.push_back(gather_tree(column, device, dim));
  }
  if (tuple) {
    return c10::ivalue::Tuple::create(std::move(gathered));
  }
  c10::impl::GenericList list(first.toList().elementType());
  for (auto& g : gathered) {
    list.push_back(std::move(g));
  }
  return list;
}

// Every replica's value is a dict with the keys of the first: each key's value gathers theirs.
IValue gather_dicts(const std::vector<IValue>& outputs, torch::Device device, int64_t dim) {
  auto dict = outputs.front().toGenericDict();
  c10::impl::GenericDict gathered(dict.keyType(), dict.valueType());
  for (const auto& entry : dict) {
    std::vector<IValue> column;
    for (const auto& out : outputs) {
      auto other = out.toGenericDict();
      TORCH_CHECK(other.size() == dict.size(), "All dicts must have the same number of keys");
      auto found = other.find(entry.key());
      TORCH_CHECK(found != other.end(), "gather: a replica's output dict lacks key ",
                  entry.key());
      column.push_back(found->value());
    }
    gathered.insert(entry.key(), gather_tree(column, device, dim));
  }
  return gathered;
}

IValue gather_tree(const std::vector<IValue>& outputs, torch::Device device, int64_t dim) {
  const IValue& first = outputs.front();
  if (first.isTensor() && first.toTensor().defined()) {
    return gather_tensors(outputs, device, dim);
  }
  auto same_kind = [&](auto is_kind) {
    for (const auto& out : outputs) {
      TORCH_CHECK(is_kind(out), "gather: replica outputs differ in structure: ", first.tagKind(),
                  " in replica 0, ", out.tagKind(), " in another");
    }
  };
  auto is_nothing = [](const IValue& v) {
    return v.isNone() || (v.isTensor() && !v.toTensor().defined());
  };
  if (is_nothing(first)) {
    same_kind(is_nothing);
    return first;
  }
  if (first.isTuple() || first.isList()) {
    const bool tuple = first.isTuple();
    same_kind([&](const IValue& v) { return tuple ? v.isTuple() : v.isList(); });
    return gather_sequences(outputs, device, dim);
  }
  if (first.isGenericDict()) {
    same_kind([](const IValue& v) { return v.isGenericDict(); });
    return gather_dicts(outputs, device, dim);
  }
  TORCH_CHECK(false, "gather: can only gather tensors, and tuples, lists and dicts of them "
              "(or None), but a replica returned ", first.tagKind());
}

}  // namespace

std::vector<c10::IValue> scatter(const c10::IValue& inputs, const std::vector<torch::Device>& devices,
                                 int64_t dim) {
  TORCH_CHECK(!devices.empty(), "scatter: expected at least one device");
  return scatter_tree(inputs, devices, dim);
}

c10::IValue gather(const std::vector<c10::IValue>& outputs, torch::Device output_device,
                   int64_t dim) {
  TORCH_CHECK(!outputs.empty(), "gather: expected at least one replica output");
  return gather_tree(outputs, output_device, dim);
}

namespace detail {

void for_each_tensor(const c10::IValue& tree, const std::function<void(const at::Tensor&)>& fn) {
  if (tree.isTensor()) {
    if (tree.toTensor().defined()) {
      fn(tree.toTensor());
    }
  } else if (tree.isTuple()) {
    for (const auto& e : tree.toTupleRef().elements()) {
      for_each_tensor(e, fn);
    }
  } else if (tree.isList()) {
    for (const auto& e : tree.toListRef()) {
      for_each_tensor(e, fn);
    }
  } else if (tree.isGenericDict()) {
    for (const auto& entry : tree.toGenericDict()) {
      for_each_tensor(entry.value(), fn);
    }
  }
}

c10::IValue map_tensors(const c10::IValue& tree,
                        const std::function<at::Tensor(const at::Tensor&)>& fn) {
  if (tree.isTensor()) {
    return tree.toTensor().defined() ? c10::IValue(fn(tree.toTensor())) : tree;
  }
  if (tree.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const auto& e : tree.toTupleRef().elements()) {
      elements.push_back(map_tensors(e, fn));
    }
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  if (tree.isList()) {
    c10::impl::GenericList list(tree.toList().elementType());
    for (const auto& e : tree.toListRef()) {
      list.push_back(map_tensors(e, fn));
    }
    return list;
  }
  if (tree.isGenericDict()) {
    auto dict = tree.toGenericDict();
    c10::impl::GenericDict mapped(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) {
      mapped.insert(entry.key(), map_tensors(entry.value(), fn));
    }
    return mapped;
  }
  return tree;
}

}  // namespace detail
}  // namespace dpx
