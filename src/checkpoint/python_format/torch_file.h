// Reading torch.save's zip (torch_file.cpp) with what torch_load drops: the BUILD states of
// dicts (an OrderedDict state dict's _metadata, for load_state_dict).
#pragma once

#include <string>
#include <string_view>

#include "checkpoint/python_format/pickle.h"

namespace dpx::detail {

Unpickled read_torch_file(const std::string& path, const TorchLoadLimits& limits);
// The same from the file's bytes in memory (e.g. one record of a DCP .distcp file); `what`
// names them in errors.
Unpickled read_torch_bytes(std::string_view bytes, const std::string& what,
                           const TorchLoadLimits& limits);

// What torch_save writes to a file, in memory, or handed piece by piece to `sink` (e.g. one
// chunk of a DCP .distcp file, straight into it).
std::string torch_save_bytes(const c10::IValue& value);
void torch_save_to(const c10::IValue& value, const ByteSink& sink);

// The format a checkpoint path names: safetensors for ".safetensors", torch.save's otherwise.
bool is_safetensors(const std::string& path);

}  // namespace dpx::detail
