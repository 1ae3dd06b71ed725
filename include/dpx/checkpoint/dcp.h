// PyTorch's distributed checkpoints (torch.distributed.checkpoint, "DCP"): a directory with a
// `.metadata` file and `__<rank>_<k>.distcp` files, written by dcp.save on any number of ranks.
//
//   // Python: dcp.save({"model": model.state_dict()}, checkpoint_id="ckpt")   (FSDP2 or not)
//   dpx::dcp_load_state_dict(*net, "ckpt", {.prefix = "model."});  // one process, whole module
//
//   // C++, every rank of a fully_shard or DDP job:
//   dpx::dcp_save_state_dict(*net, "ckpt", pg, {.prefix = "model."});
//   // Python, on any number of ranks: dcp.load({"model": model.state_dict()}, checkpoint_id="ckpt")
//
// What is read: the tensors, each assembled from the chunks its writers held (any number of
// writers, shards of any size, empty ones included). The `.metadata` pickle is untrusted input
// and is read without running it (Note [DCP metadata] in src/checkpoint/dcp/metadata.h lists
// what is refused). What is written: a fully_shard module's parameters as each rank's shard,
// replicated tensors (a DDP module's, buffers) once, spread over the ranks. An optimizer's state
// in FSDP2's layout is read and written (Note [DCP optimizer state]), a ZeroRedundancyOptimizer's
// too (each rank the state of its share). Saves in the background: DcpCheckpointer's async_save.
// Not read: the safetensors form, which PyTorch's own dcp.load refuses (docs/checkpoint.md).
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpx/checkpoint/checkpoint_file.h"
#include "dpx/checkpoint/python_format.h"
#include "dpx/comm/process_group.h"
#include "dpx/store/types.h"

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

// Loads the checkpoint into `module` with load_state_dict's rules (names, shapes, dtype
// conversion, strict). An unsharded module on one process gets every tensor whole. A fully_shard
// module (on any number of ranks, whatever the number that saved) gets on each rank the rows of
// its shards, read from the chunks that hold them and no others; not collective. A
// CheckpointError says what is wrong with the directory, naming the file; the module is
// unchanged unless everything was read.
LoadStateDictResult dcp_load_state_dict(torch::nn::Module& module, const std::string& directory,
                                        const DcpLoadOptions& options = {});

// Note [DCP optimizer state]
// FSDP2's get_optimizer_state_dict(model, optimizer) keys the state by parameter names, and
// dcp.save({"model": ..., "optim": osd}) flattens it (PyTorch 2.15, default StateDictOptions):
//   optim.state.<name>.<key>     a tensor: exp_avg, exp_avg_sq, max_exp_avg_sq, momentum_buffer
//                                sharded like the parameter (its chunks the ranks' rows); step
//                                a 0-dim float32 tensor, the same on every rank
//   optim.param_groups.<i>.<hp>  an object (BytesStorageMetadata), a torch.save of group i's
//                                hyper-parameter: lr, betas (a tuple), eps, ..., and params,
//                                the list of the group's parameter names
// A parameter that was never stepped has no state entries. SGD, Adam and AdamW are mapped, with
// the hyper-parameters LibTorch has (maximize must be False; decoupled_weight_decay tells AdamW
// from Adam).

// Loads the optimizer's state of `module` (fully_shard or not, on any number of ranks whatever
// the number that saved) from the entries under `options.prefix` ("optim." for a checkpoint
// saved as {"model": ..., "optim": ...}): each rank reads the rows of its shards of each state
// tensor, and each group's hyper-parameters. A ZeroRedundancyOptimizer gets on each rank the
// state of its share. The module's own state is loaded by
// dcp_load_state_dict with prefix "model.". Not collective. A CheckpointError names the key and
// the directory when the checkpoint's parameters, groups or shapes are not the optimizer's; the
// optimizer is unchanged unless everything was read. The objects are read with the restricted
// unpickler: nothing in the file runs.
void dcp_load_optimizer_state_dict(const torch::nn::Module& module,
                                   torch::optim::Optimizer& optimizer,
                                   const std::string& directory,
                                   const DcpLoadOptions& options = {.prefix = "optim."});

struct DcpSaveOptions {
  // Put before every key, as dcp.save({"model": state_dict}) names them: "model." makes
  // "fc1.weight" the checkpoint's "model.fc1.weight". A Python job loads it with
  // dcp.load({"model": model.state_dict()}, ...).
  std::string prefix;
  // The optimizer's entries' start, with an optimizer given: "optim." makes them
  // "optim.state.fc1.weight.exp_avg", as dcp.save({"model": ..., "optim": osd}) names them.
  std::string optimizer_prefix = "optim.";
  std::chrono::milliseconds timeout = kDefaultTimeout;  // the collectives that gather the layout
  CheckpointWriteOptions write;                         // test hooks (each rank's file)
};

// Writes `module`'s state dict to `directory` as torch.distributed.checkpoint.save does.
// Collective over `process_group` (null: a fully_shard module's own group, or one process).
// Each rank writes __<rank>_0.distcp atomically: the rows it holds of each sharded parameter,
// and the replicated tensors it was given (each written by one rank, in turn). Then rank 0
// writes .metadata last, atomically, after every rank's file is complete; until then the
// directory is no checkpoint (an older .metadata there is removed first). A rank that fails
// makes every rank throw. To keep the previous checkpoint loadable while a new one is written,
// give each save its own directory.
void dcp_save_state_dict(const torch::nn::Module& module, const std::string& directory,
                         std::shared_ptr<ProcessGroup> process_group,
                         const DcpSaveOptions& options = {});

// The same with `optimizer`'s state (SGD, Adam or AdamW over `module`'s parameters) in the same
// checkpoint, under options.optimizer_prefix, as FSDP2's get_optimizer_state_dict names it
// (Note [DCP optimizer state]): each rank writes the rows of its shards of each state tensor; the
// step counts and each group's hyper-parameters (objects) are written once. A
// ZeroRedundancyOptimizer (over an unsharded module) is written as a plain optimizer: each state
// tensor whole, by the rank that owns it (Note [DCP from ZeRO] in src/checkpoint/dcp/dcp_zero.cpp).
// A Python job on any number of ranks loads it with dcp.load({"model": msd, "optim": osd}) and
// set_optimizer_state_dict; dpx with dcp_load_optimizer_state_dict.
void dcp_save_state_dict(const torch::nn::Module& module,
                         const torch::optim::Optimizer& optimizer, const std::string& directory,
                         std::shared_ptr<ProcessGroup> process_group,
                         const DcpSaveOptions& options = {});

}  // namespace dpx
