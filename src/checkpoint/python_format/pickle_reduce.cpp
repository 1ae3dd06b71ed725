// What the restricted unpickler lets a pickle call (pickle_reader.h): the allow-listed globals,
// persistent ids naming storages, and torch._utils._rebuild_tensor_v2's views over them.
#include <optional>

#include "checkpoint/python_format/pickle_reader.h"

namespace dpx::detail {
namespace {

const char* const kOrderedDict = "collections.OrderedDict";
const char* const kRebuildTensor = "torch._utils._rebuild_tensor_v2";
const char* const kRebuildParameter = "torch._utils._rebuild_parameter";
// DCP's metadata (pickle_load_dcp_metadata).
const char* const kTorchSize = "torch.Size";
const char* const kGetLayout = "torch.serialization._get_layout";
const char* const kGetattr = "builtins.getattr";
const char* const kMemoryFormats = "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING";
const char* const kPosixPath = "pathlib.PosixPath";
const char* const kWindowsPath = "pathlib.WindowsPath";

// The dataclasses a DCP .metadata file is made of (PyTorch 2.x; a class added by a later
// version is refused by name until it is added here).
bool dcp_class(const std::string& global) {
  static const char* const classes[] = {
      "torch.distributed.checkpoint.metadata.Metadata",
      "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
      "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
      "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
      "torch.distributed.checkpoint.metadata.TensorProperties",
      "torch.distributed.checkpoint.metadata.MetadataIndex",
      "torch.distributed.checkpoint.metadata.StorageMeta",
      "torch.distributed.checkpoint.filesystem._StorageInfo",
  };
  for (const char* c : classes) {
    if (global == c) return true;
  }
  return false;
}

bool dcp_global_allowed(const std::string& global) {
  if (dcp_class(global) || global == kTorchSize || global == kGetLayout || global == kGetattr ||
      global == kMemoryFormats || global == kPosixPath || global == kWindowsPath ||
      global == kOrderedDict) {
    return true;
  }
  const std::string prefix = "torch.";
  return global.rfind(prefix, 0) == 0 && dtype_named(global.substr(prefix.size())).has_value();
}

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
  const std::string module = line(), name = line();
  push_global(module, name);
}

void PickleReader::op_stack_global() {
  const NodeId name = pop(), module = pop();
  if (!node(name).value.isString() || !node(module).value.isString()) {
    fail("malformed STACK_GLOBAL: module and name must be strings");
  }
  push_global(node(module).value.toStringRef(), node(name).value.toStringRef());
}

void PickleReader::push_global(const std::string& module, const std::string& name) {
  const std::string full = module + "." + name;
  const bool allowed = dialect_ == PickleDialect::kDcpMetadata
                           ? dcp_global_allowed(full)
                           : full == kOrderedDict || full == kRebuildTensor ||
                                 full == kRebuildParameter || storage_global_dtype(full);
  if (!allowed) {
    fail("refusing to load global '" + full + "': " +
         (dialect_ == PickleDialect::kDcpMetadata
              ? "DCP's metadata is read with only its own classes, torch.Size, dtypes, layouts, "
                "memory formats and paths allowed"
              : "only tensors, OrderedDict and plain values are loaded (as "
                "torch.load(weights_only=True) does)"));
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
  } else if (dialect_ == PickleDialect::kDcpMetadata) {
    if (!reduce_dcp(f, a)) fail("cannot call " + f);
  } else if (f == kRebuildParameter) {  // (data, requires_grad, hooks): the tensor itself
    if (a.empty() || !node(a[0]).value.isTensor()) fail("malformed _rebuild_parameter");
    stack_.push_back(a[0]);
  } else if (f == kRebuildTensor) {
    stack_.push_back(rebuild_tensor(a));
  } else {
    fail("cannot call " + f);
  }
}

// The calls DCP's metadata makes, each answered with what it names: torch.Size(tuple) is the
// tuple; _get_layout('torch.strided'), getattr(_MEM_FORMAT_ENCODING, 'TORCH_CONTIGUOUS_FORMAT')
// and PosixPath('a', 'b') their strings ('torch.strided', 'TORCH_CONTIGUOUS_FORMAT', 'a/b').
bool PickleReader::reduce_dcp(const std::string& f, const std::vector<NodeId>& a) {
  const auto is_string = [&](NodeId id) { return node(id).value.isString(); };
  if (f == kTorchSize) {
    if (a.size() != 1 || node(a[0]).kind != Node::kTuple) fail("malformed torch.Size(...)");
    stack_.push_back(a[0]);
  } else if (f == kGetLayout) {
    if (a.size() != 1 || !is_string(a[0])) fail("malformed _get_layout(...)");
    stack_.push_back(a[0]);
  } else if (f == kGetattr) {
    if (a.size() != 2 || node(a[0]).kind != Node::kGlobal ||
        node(a[0]).value.toStringRef() != kMemoryFormats || !is_string(a[1])) {
      fail("getattr(...) is read only for a memory format of DCP's _MEM_FORMAT_ENCODING");
    }
    stack_.push_back(a[1]);
  } else if (f == kPosixPath || f == kWindowsPath) {
    std::string path;
    for (const NodeId part : a) {
      if (!is_string(part)) fail("a path made of something other than strings");
      path += (path.empty() ? "" : "/") + node(part).value.toStringRef();
    }
    push_value(path);
  } else {
    return false;
  }
  return true;
}

// NEWOBJ: cls.__new__(cls) for one of DCP's dataclasses, whose fields BUILD then sets.
void PickleReader::op_newobj() {
  const NodeId args = pop(), cls = pop();
  if (dialect_ != PickleDialect::kDcpMetadata || node(cls).kind != Node::kGlobal ||
      !dcp_class(node(cls).value.toStringRef())) {
    fail("NEWOBJ is read only for DCP's metadata classes");
  }
  if (node(args).kind != Node::kTuple || !node(args).items.empty()) {
    fail("NEWOBJ with arguments (DCP's classes take none)");
  }
  push(Node{Node::kObject, node(cls).value, {}});
}

// Python's BUILD sets an object's attributes. A DCP object keeps its state (once); of the
// others, only a dict's is read (an OrderedDict's _metadata, kept for load_state_dict). Tensors
// and other targets ignore their state.
void PickleReader::op_build() {
  const NodeId state = pop(), target = top();
  if (node(target).kind == Node::kObject) {
    if (!node(target).items.empty()) fail("an object built twice");
    graph_[target].items.push_back(state);
  } else if (node(target).kind == Node::kDict && node(state).kind == Node::kDict) {
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
