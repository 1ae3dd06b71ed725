// safetensors files: an 8-byte little-endian header size, a JSON header
// {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the tensors' raw little-endian bytes. Only tensors, by name: nothing in it can run.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace dpx::detail {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

std::string safetensors_bytes(const NamedTensors& tensors);

// The tensors of the file at `path`, in the order of their data; CheckpointError naming the
// file for anything malformed.
NamedTensors read_safetensors(const std::string& path);

}  // namespace dpx::detail
