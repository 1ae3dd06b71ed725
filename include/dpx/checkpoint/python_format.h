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
// Integrity: every zip record carries a CRC-32, checked on load (torch.load checks it too).
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>

#include <optional>
#include <string>
#include <vector>

#include "dpx/checkpoint/checkpoint_file.h"

namespace dpx {

// torch.save(value, path) and torch.load(path, weights_only=True). Tensors are written as
// contiguous CPU copies; loaded ones are CPU tensors (views of one storage where Python shared it).
void torch_save(const c10::IValue& value, const std::string& path,
                const CheckpointWriteOptions& write = {});
c10::IValue torch_load(const std::string& path);

// safetensors: a flat {name: tensor} map plus optional string metadata (__metadata__).
void safetensors_save(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& metadata = {},
                      const CheckpointWriteOptions& write = {});
std::vector<std::pair<std::string, at::Tensor>> safetensors_load(const std::string& path);

// Python's module.state_dict(): parameters and buffers by dotted name, in registration order.
std::vector<std::pair<std::string, at::Tensor>> state_dict(const torch::nn::Module& module);

// Writes state_dict(module) atomically (.safetensors or torch.save form, by extension).
void save_state_dict(const torch::nn::Module& module, const std::string& path);

struct LoadStateDictOptions {
  // As Python's strict: true makes any missing or unexpected key an error; false loads the keys
  // both sides have and returns the others. A shape mismatch is an error either way (as Python).
  bool strict = true;
};

struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // in the module, not in the file
  std::vector<std::string> unexpected_keys;  // in the file, not in the module
};

// Copies the file's tensors into the module's parameters and buffers by name (converting dtype
// and device as Python's load_state_dict does). On a mismatch it throws CheckpointError naming
// every missing, unexpected and mis-shaped key at once, and leaves the module unchanged.
LoadStateDictResult load_state_dict(torch::nn::Module& module, const std::string& path,
                                    const LoadStateDictOptions& options = {});

// The same from tensors in memory (e.g. torch_load(path).toGenericDict()["model"]).
LoadStateDictResult load_state_dict(torch::nn::Module& module,
                                    const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                    const LoadStateDictOptions& options = {});

}  // namespace dpx
