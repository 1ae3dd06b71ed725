// What the restricted unpickler lets a pickle call (pickle_reader.h): the allow-listed globals,
// persistent ids naming storages, and torch._utils._rebuild_tensor_v2's views over them.
#include <optional>

#include "checkpoint/python_format/pickle_reader.h"

namespace dpx::detail {
namespace {

const char* const kOrderedDict = "collections.OrderedDict";
const char* const kRebuildTensor = "torch._utils._rebuild_tensor_v2";
const char* const kRebuildParameter = "torch._utils._rebuild_parameter";

// torch.FloatStorage -> kFloat.
std::optional<c10::ScalarType> storage_global_dtype(const std::string& global) {
  const std::string prefix = "torch.", suffix = "Storage";
  if (global.size() <= prefix.size() + suffix.size() || global.rfind(prefix, 0) != 0 ||
      global.compare(global.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  return storage_dtype_named(
      global.substr(prefix.size(), global.size() - prefix.size() - suffix.size()));
}

}  // namespace

void PickleReader::op_global() {
  const std::string module = line(), name = line(), full = module + "." + name;
  if (full != kOrderedDict && full != kRebuildTensor && full != kRebuildParameter &&
      !storage_global_dtype(full)) {
    fail("refusing to load global '" + full +
         "': only tensors, OrderedDict and plain values are loaded (as "
         "torch.load(weights_only=True) does)");
  }
  push(Node{Node::kGlobal, c10::IValue(full), {}});
}

void PickleReader::op_reduce() {
  const NodeId args = pop(), callable = pop();
  if (node(callable).kind != Node::kGlobal || node(args).kind != Node::kTuple) {
    fail("malformed REDUCE");
  }
  const std::string& f = node(callable).value.toStringRef();
  const std::vector<NodeId> a = node(args).items;
  if (f == kOrderedDict) {
    if (!a.empty()) fail("OrderedDict(...) with arguments is not read (torch.save writes none)");
    push(Node{Node::kDict, {}, {}});
  } else if (f == kRebuildParameter) {  // (data, requires_grad, hooks): the tensor itself
    if (a.empty() || !node(a[0]).value.isTensor()) fail("malformed _rebuild_parameter");
    stack_.push_back(a[0]);
  } else if (f == kRebuildTensor) {
    stack_.push_back(rebuild_tensor(a));
  } else {
    fail("cannot call " + f);
  }
}

// Python's BUILD sets an object's attributes; the only ones read are a dict's (an OrderedDict's
// _metadata), kept for load_state_dict. Tensors and other targets ignore their state.
void PickleReader::op_build() {
  const NodeId state = pop(), target = top();
  if (node(target).kind == Node::kDict && node(state).kind == Node::kDict) {
    dict_states_.emplace_back(target, state);
  }
}

void PickleReader::op_binpersid() {
  const NodeId pid = pop();
  push_value(storage(pid));
}

// ('storage', torch.<Type>Storage, key, location, numel): the record data/<key>, loaded once
// and shared by every tensor that views it.
at::Tensor PickleReader::storage(NodeId pid) {
  const auto& p = node(pid).items;
  if (node(pid).kind != Node::kTuple || p.size() != 5 || node(p[1]).kind != Node::kGlobal ||
      !node(p[2]).value.isString()) {
    fail("unsupported persistent id (expected ('storage', type, key, location, numel))");
  }
  const std::string& type = node(p[1]).value.toStringRef();
  const auto dtype = storage_global_dtype(type);
  if (!dtype) fail("unknown storage type " + type);
  const std::string& key = node(p[2]).value.toStringRef();
  auto found = storages_.find(key);
  if (found == storages_.end()) found = storages_.emplace(key, load_(key, *dtype)).first;
  return found->second;
}

std::vector<int64_t> PickleReader::ints(NodeId tuple, const char* what) {
  if (node(tuple).kind != Node::kTuple) fail(std::string("expected a tuple of ints for ") + what);
  std::vector<int64_t> xs;
  for (const NodeId x : node(tuple).items) {
    if (!node(x).value.isInt()) fail(std::string("non-int in ") + what);
    xs.push_back(node(x).value.toInt());
  }
  return xs;
}

// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks[, metadata]):
// a view, after checking that it stays inside its storage.
NodeId PickleReader::rebuild_tensor(const std::vector<NodeId>& a) {
  if (a.size() < 4 || !node(a[0]).value.isTensor() || !node(a[1]).value.isInt()) {
    fail("malformed _rebuild_tensor_v2 arguments");
  }
  const at::Tensor storage = node(a[0]).value.toTensor();
  const int64_t offset = node(a[1]).value.toInt();
  const auto size = ints(a[2], "the tensor size"), stride = ints(a[3], "the tensor stride");
  if (size.size() != stride.size()) fail("tensor size and stride differ in length");
  if (offset < 0) fail("negative storage offset");
  int64_t numel = 1;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] < 0 || stride[i] < 0) fail("negative tensor size or stride");
    if (__builtin_mul_overflow(numel, size[i], &numel)) fail("tensor size overflows 64 bits");
  }
  // As PyTorch's own check: an empty view may sit anywhere; another must end inside.
  int64_t last = offset;  // the highest element index the view touches
  for (size_t i = 0; i < size.size() && numel > 0; ++i) {
    if (size[i] > 1 && stride[i] > (INT64_MAX - last) / (size[i] - 1)) {
      fail("tensor size times stride overflows");
    }
    last += (size[i] - 1) * stride[i];
  }
  if (numel > 0 && last >= storage.numel()) {
    fail("tensor view reaches past its storage of " + std::to_string(storage.numel()) +
         " elements");
  }
  return graph_.add(Node{Node::kValue, storage.as_strided(size, stride, offset), {}});
}

}  // namespace dpx::detail
