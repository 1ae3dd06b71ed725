// Python's pickle, as much of it as torch.save's files need (protocol 2), on c10::IValue.
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
// a CheckpointError before anything is called.
#pragma once

#include <ATen/core/ivalue.h>

#include <functional>
#include <string>
#include <vector>

namespace dpx::detail {

// Pickles `value`; every tensor's bytes are appended to `storages` (contiguous CPU copies), the
// i-th under key std::to_string(i).
std::string pickle_dump(const c10::IValue& value, std::vector<at::Tensor>& storages);

// Loads a storage: key and element type -> a 1-D CPU tensor of its elements.
using StorageLoader = std::function<at::Tensor(const std::string& key, c10::ScalarType dtype)>;

// Unpickles `data`; `what` names the file in errors (CheckpointError).
c10::IValue pickle_load(const std::string& data, const StorageLoader& load_storage,
                        const std::string& what);

// "Float" for kFloat, as in torch.FloatStorage; throws for types torch.save cannot name.
std::string storage_type_name(c10::ScalarType dtype);

}  // namespace dpx::detail
