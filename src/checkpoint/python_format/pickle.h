// Python's pickle, as much of it as torch.save's files (protocol 2) and DCP's metadata (protocol
// 4) need, on c10::IValue.
//
// The writer emits what Python's torch.save emits for a state dict: dicts, lists, tuples, ints,
// floats, strings, bools, None, and tensors as torch._utils._rebuild_tensor_v2 over a storage
// referenced by a persistent id ('storage', torch.<Type>Storage, key, 'cpu', numel); the storage
// bytes go into the zip as data/<key> (torch_file.cpp). No typed-container tags (TorchScript's
// pickler writes torch.jit._pickle.* globals, which torch.load(weights_only=True) refuses).
//
// The reader is restricted like torch.load(weights_only=True): the only globals it resolves are
// collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter and
// the torch.<Type>Storage classes; any other global (a __main__ class, os.system) is refused with
// a CheckpointError before anything is called. It treats the file as hostile (Note [Pickle graph]
// in pickle_graph.h): depth, cycles, sharing and size are bounded before any IValue is built.
#pragma once

#include <ATen/core/ivalue.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dpx/checkpoint/python_format.h"
#include "checkpoint/python_format/pickle_graph.h"

namespace dpx::detail {

// Pickles `value`; every tensor's bytes are appended to `storages` (contiguous CPU copies), the
// i-th under key std::to_string(i).
std::string pickle_dump(const c10::IValue& value, std::vector<at::Tensor>& storages);

// Loads a storage: key and element type -> a 1-D CPU tensor of its elements.
using StorageLoader = std::function<at::Tensor(const std::string& key, c10::ScalarType dtype)>;

struct Unpickled {
  c10::IValue value;
  // The state BUILD gave each dict, as (dict, state): Python's OrderedDict state dicts carry
  // their modules' versions as a `_metadata` attribute, which an IValue dict cannot hold.
  std::vector<std::pair<c10::IValue, c10::IValue>> dict_states;
};

// Unpickles `data`; `what` names the file in errors (CheckpointError).
Unpickled pickle_load(const std::string& data, const StorageLoader& load_storage,
                      const std::string& what, const TorchLoadLimits& limits);

// What DCP's .metadata pickle may name besides plain values: its dataclasses (built by NEWOBJ
// and BUILD into Node::kObject nodes), torch.Size (a tuple), dtypes (torch.float32: a global),
// layouts (_get_layout('torch.strided')), memory formats (getattr(_MEM_FORMAT_ENCODING, name)),
// and paths (pathlib.PosixPath): each of these last three becomes its string. Anything else is
// refused before it is called, as in pickle_load. The graph comes back checked (PickleGraph::check)
// and unconverted: dataclass objects are keys of its dicts, which no IValue can be.
struct PickledObjects {
  PickleGraph graph;
  NodeId root;
};
PickledObjects pickle_load_dcp_metadata(const std::string& data, const std::string& what,
                                        const TorchLoadLimits& limits);

// "Float" for kFloat, as in torch.FloatStorage; throws for types torch.save cannot name.
std::string storage_type_name(c10::ScalarType dtype);
// The reverse: kFloat for "Float"; nullopt for a name torch.save does not write.
std::optional<c10::ScalarType> storage_dtype_named(const std::string& name);
// "float32" for kFloat, as Python names torch.float32; and the reverse (nullopt for another).
std::string dtype_python_name(c10::ScalarType dtype);
std::optional<c10::ScalarType> dtype_named(const std::string& python_name);

}  // namespace dpx::detail
