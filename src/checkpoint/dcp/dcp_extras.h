// Entries beside a module's and optimizer's state in a DCP checkpoint, as Python's dcp.save
// writes the other values of its state dict: what the DcpCheckpointer keeps its progress in.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "dpx/checkpoint/dcp.h"

namespace dpx::detail::dcp {

// One value at `path` in the nested dict Python would have saved: {"progress", "step"} is the
// checkpoint's "progress.step". A tensor is written whole by one rank, anything else as an
// object (BytesStorageMetadata); every rank must pass the same entries.
struct ExtraEntry {
  std::vector<std::variant<std::string, int64_t>> path;
  c10::IValue value;
};

// dcp_save_state_dict(module, optimizer, ...) with `extras` in the same checkpoint, so the one
// .metadata, written last, covers them too.
void save_with_extras(const torch::nn::Module& module, const torch::optim::Optimizer& optimizer,
                      const std::string& directory, std::shared_ptr<ProcessGroup> process_group,
                      const DcpSaveOptions& options, const std::vector<ExtraEntry>& extras);

}  // namespace dpx::detail::dcp
