// PyTorch's distributed checkpoints (torch.distributed.checkpoint, "DCP"): a directory with a
// `.metadata` file and `__<rank>_<k>.distcp` files, written by dcp.save on any number of ranks.
//
//   // Python: dcp.save({"model": model.state_dict()}, checkpoint_id="ckpt")   (FSDP2 or not)
//   dpx::dcp_load_state_dict(*net, "ckpt", {.prefix = "model."});  // one process, whole module
//
// What is read: the tensors, each assembled from the chunks its writers held (any number of
// writers, shards of any size, empty ones included). The `.metadata` pickle is untrusted input
// and is read without running it (Note [DCP metadata] in src/checkpoint/dcp/metadata.h lists
// what is refused). Not yet: writing DCP checkpoints, loading into fully_shard's shards,
// optimizer state, asynchronous saves; the safetensors form (docs/checkpoint.md).
#pragma once

#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

#include "dpx/checkpoint/python_format.h"

namespace dpx {

struct DcpLoadOptions {
  // The keys' common start: dcp.save flattens nested dicts with dots, so a checkpoint saved as
  // {"model": model.state_dict(), "optim": ...} holds "model.fc1.weight"; prefix "model." loads
  // those into the module's "fc1.weight". Keys without the prefix are not the module's.
  std::string prefix;
  bool strict = true;  // as load_state_dict's (python_format.h)
  TorchLoadLimits limits;
};

// Every tensor of the checkpoint whose key starts with `prefix`, whole, with the prefix dropped:
// what PyTorch's dcp_to_torch_save would put in its file, tensors only.
std::vector<std::pair<std::string, at::Tensor>> dcp_read_tensors(
    const std::string& directory, const std::string& prefix = "",
    const TorchLoadLimits& limits = {});

// Loads those tensors into an unsharded module on one process with load_state_dict's rules
// (names, shapes, dtype conversion, strict). A CheckpointError says what is wrong with the
// directory, naming the file.
LoadStateDictResult dcp_load_state_dict(torch::nn::Module& module, const std::string& directory,
                                        const DcpLoadOptions& options = {});

}  // namespace dpx
