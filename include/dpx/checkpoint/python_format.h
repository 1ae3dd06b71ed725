// Files Python reads and writes: torch.save's zip + pickle format and safetensors.
//
//   dpx::save_state_dict(model, "model.pt");  // Python: torch.load("model.pt", weights_only=True)
//   dpx::load_state_dict(model, "python.pt");  // Python wrote torch.save(model.state_dict(), ...)
//   auto r = dpx::load_state_dict(model, "x.safetensors", {.strict = false});  // r.missing_keys
//
// The format follows the extension: .safetensors is safetensors, anything else (.pt, .pth) is
// torch.save's. Names are Python's state_dict names: the dotted names of parameters and buffers.
// Reading is restricted like torch.load(weights_only=True): tensors, dicts (OrderedDict too),
// lists, tuples, ints, floats, bools, strings and None; any other object is a CheckpointError.
// A file is untrusted input: whatever it holds, loading it ends in a value or a CheckpointError
// within the bounds of TorchLoadLimits (docs/checkpoint.md, "What the reader refuses").
// Integrity: every zip record carries a CRC-32, checked on load (torch.load does not).
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>

#include <optional>
#include <string>
#include <vector>

#include "dpx/checkpoint/checkpoint_file.h"

namespace dpx {

// What one torch.save file may make the reader build; past a bound the file is refused with a
// CheckpointError that names the bound. Real checkpoints stay far below them. Whatever the
// limits, containers nested deeper than kMaxPickleDepth levels and containers that hold
// themselves are refused: a c10::IValue that deep or cyclic could not even be destroyed safely.
constexpr int64_t kMaxPickleDepth = 1000;  // Python's default recursion limit
struct TorchLoadLimits {
  // Objects the pickle creates (containers, numbers, strings, tensor views), each costing the
  // reader about 150 bytes; what the memo shares is built once and counted once. The tensors'
  // own bytes are the file's records, never more than the file holds.
  int64_t max_objects = 10'000'000;
};

// torch.save(value, path) and torch.load(path, weights_only=True). Tensors are written as
// contiguous CPU copies; loaded ones are CPU tensors (views of one storage where Python shared it).
void torch_save(const c10::IValue& value, const std::string& path,
                const CheckpointWriteOptions& write = {});
c10::IValue torch_load(const std::string& path, const TorchLoadLimits& limits = {});

// safetensors: a flat {name: tensor} map plus optional string metadata (__metadata__). The
// tensors are written in the order given (header and data), and loaded in the order of their
// data in the file, as Python's safetensors.torch.load_file returns them.
void safetensors_save(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& metadata = {},
                      const CheckpointWriteOptions& write = {});
std::vector<std::pair<std::string, at::Tensor>> safetensors_load(const std::string& path);

// Python's module.state_dict(): module by module (pre-order), each module's own parameters and
// then its own buffers, in registration order: 0.weight, 0.bias, 1.weight, 1.bias,
// 1.running_mean, 1.running_var, 1.num_batches_tracked, 2.weight, ...
std::vector<std::pair<std::string, at::Tensor>> state_dict(const torch::nn::Module& module);

// Writes state_dict(module) atomically (.safetensors or torch.save form, by extension).
void save_state_dict(const torch::nn::Module& module, const std::string& path);

struct LoadStateDictOptions {
  // As Python's strict: true makes any missing or unexpected key an error; false loads the keys
  // both sides have and returns the others. A shape mismatch is an error either way (as Python).
  bool strict = true;
  TorchLoadLimits limits;  // for torch.save files
};

struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // in the module, not in the file
  std::vector<std::string> unexpected_keys;  // in the file, not in the module
};

// Copies the file's tensors into the module's parameters and buffers by name (converting dtype
// and device as Python's load_state_dict does), with Python's rules for old files
// (Note [Python's loading rules] in state_dict.cpp): a 1-element 1-D tensor loads into a 0-dim parameter or
// buffer, and a norm layer's missing num_batches_tracked is kept as it is unless the file's
// version metadata says the layer had one. On a mismatch it throws CheckpointError naming every
// missing, unexpected and mis-shaped key at once, and leaves the module unchanged.
LoadStateDictResult load_state_dict(torch::nn::Module& module, const std::string& path,
                                    const LoadStateDictOptions& options = {});

// The same from tensors in memory (e.g. torch_load(path).toGenericDict()["model"]); like a
// Python dict without _metadata, they carry no module versions.
LoadStateDictResult load_state_dict(torch::nn::Module& module,
                                    const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                    const LoadStateDictOptions& options = {});

}  // namespace dpx
