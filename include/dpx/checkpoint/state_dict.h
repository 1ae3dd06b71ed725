// Weights files Python reads and writes: a module's state_dict (its parameters and buffers
// under their dotted names, as Python's Module.state_dict() names them) in torch.save's format
// (.pt, .pth: `torch.load(path, weights_only=True)` reads it, PyTorch 1.13 and 2.15) or as
// safetensors (.safetensors), and loading what Python wrote with torch.save(model.state_dict())
// or safetensors into a LibTorch module by those names (Python's load_state_dict).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

namespace dpx {

// kAuto: by the file name's extension (.safetensors, else torch.save's format).
enum class WeightsFormat { kAuto, kTorch, kSafetensors };

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Python's Module.state_dict(): parameters, then buffers, under dotted names.
NamedTensors state_dict(const torch::nn::Module& module);

// Writes `tensors` atomically (a temporary file renamed into place: a crash leaves the old file
// or the new one). Only the CPU copy of each tensor is written, whole and contiguous.
void save_weights(const NamedTensors& tensors, const std::string& path,
                  WeightsFormat format = WeightsFormat::kAuto);
// The tensors of a weights file (a torch.save'd dict of tensors, or safetensors), in file
// order. A file that is missing, truncated, of another format, or whose pickle holds anything
// but dicts, lists, numbers, strings and tensors is a CheckpointError naming it; nothing in a
// file is ever run.
NamedTensors load_weights(const std::string& path, WeightsFormat format = WeightsFormat::kAuto);

inline void save_state_dict(const torch::nn::Module& module, const std::string& path,
                            WeightsFormat format = WeightsFormat::kAuto) {
  save_weights(state_dict(module), path, format);
}

struct LoadStateDictOptions {
  // As Python's strict: every key of the module must be in the file and the file may hold no
  // other. A shape that differs is an error in either mode, as in Python.
  bool strict = true;
  WeightsFormat format = WeightsFormat::kAuto;
};

// What Python's load_state_dict returns: the keys the module has and the file lacks, and the
// keys the file has and the module lacks (both empty after a strict load).
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

// Copies each tensor of the file into the module's parameter or buffer of the same name (to its
// dtype and device). Errors list every missing, unexpected and mis-shaped key at once, before
// anything is copied.
LoadStateDictResult load_state_dict(torch::nn::Module& module, const std::string& path,
                                    LoadStateDictOptions options = {});

}  // namespace dpx
