// The Checkpointer's CheckpointFormat::kTorchSave files (see checkpointer.h).
#pragma once

#include <optional>
#include <string>

#include "dpx/checkpoint/checkpointer.h"

namespace dpx::detail {

void save_torch_checkpoint(const std::string& path, const torch::nn::Module& model,
                           const torch::optim::Optimizer& optimizer,
                           const TrainingProgress& progress, const CheckpointWriteOptions& write);

// Parses the whole file (every record's CRC-32 checked); throws CheckpointError if it is bad.
c10::IValue read_torch_checkpoint(const std::string& path);

TrainingProgress load_torch_checkpoint(const c10::IValue& checkpoint, const std::string& path,
                                       torch::nn::Module& model,
                                       torch::optim::Optimizer& optimizer);

}  // namespace dpx::detail
