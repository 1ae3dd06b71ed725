// torch.save's container: a zip of data.pkl (Note [Weights pickle]) and one data/<key> record
// of raw bytes per tensor, written and read with LibTorch's own zip code (caffe2::serialize).
#pragma once

#include <ATen/core/ivalue.h>

#include <string>

namespace dpx::detail {

// The bytes of a torch.save file holding `value`.
std::string torch_file_bytes(const c10::IValue& value);

// The value of the torch.save file at `path`; CheckpointError naming the file when it is
// missing, not a zip, truncated, or holds anything but weights.
c10::IValue read_torch_file(const std::string& path);

}  // namespace dpx::detail
