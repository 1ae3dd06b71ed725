// Checkpoints of modules sharded by dpx::fully_shard: the full state dict as Python and unsharded
// LibTorch modules read it, and sharded checkpoints that every rank writes its part of and that
// resume on any world size.
//
//   dpx::save_full_state_dict(*net, "model.pt");    // Python: torch.load("model.pt", weights_only=True)
//   dpx::ShardedCheckpointer ckpt({.directory = "ckpt"}, pg);
//   ckpt.save(*net, optimizer, progress);             // every rank writes its shards
//   auto resumed = ckpt.load_latest(*net, optimizer); // on this world size or another
//
// Note [Sharded checkpoint]
// save():  1. every rank writes sharded-<step>.partial/rank<R>-of-<N>.pt atomically (as
//             write_file_atomically does): its parameters' shards, its buffers, its optimizer's
//             state in Python's layout (tensors shaped like a shard hold the shard), what each
//             shard is (name, whole shape, first row) and the progress;
//          2. barrier: every part is on disk;
//          3. rank 0 renames the folder to sharded-<step> (one rename: a checkpoint is complete
//             or absent, never in between), syncs the directory, removes all but the newest
//             keep_last checkpoints and the .partial folders of saves that did not finish;
//          4. barrier.
// load_latest(): 1. rank 0 picks the newest complete checkpoint, 2. broadcasts its step, 3. every
//          rank reads the parts that hold rows of its shards: its own part when the world size
//          is unchanged; else each part in turn (one in memory at a time), copying the rows
//          where the old rank's shard and its own overlap.
// The files are torch.save files (torch.load(weights_only=True) reads them). The optimizer's
// state is mapped for SGD, Adam and AdamW, as the Checkpointer's Python format maps it.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpx/checkpoint/checkpoint_file.h"
#include "dpx/checkpoint/checkpointer.h"
#include "dpx/comm/process_group.h"
#include "dpx/fsdp/fsdp_state_dict.h"

namespace dpx {

// Gathers `module`'s full state dict (dpx::full_state_dict) to rank 0, which writes it
// atomically to `path` (torch.save's format, or safetensors for .safetensors). Collective.
void save_full_state_dict(const torch::nn::Module& module, const std::string& path);

// Reads a full state dict file (saved by save_full_state_dict, dpx::save_state_dict or Python's
// torch.save(model.state_dict())) into a sharded module: each rank keeps its rows.
void load_full_state_dict(torch::nn::Module& module, const std::string& path);

// The optimizer's state whole, as FSDP2's get_optimizer_state_dict(model, optimizer,
// StateDictOptions(full_state_dict=True)) gives it: Python's optimizer.state_dict() layout keyed
// by parameter names ({'state': {name: {...}}, 'param_groups': [{..., 'params': [names]}]}),
// each state tensor shaped like a shard (exp_avg, momentum_buffer) gathered whole. SGD, Adam and
// AdamW. Collective; with rank0_only the other ranks get an empty dict. dpx::torch_save writes it
// for Python's torch.load; a gathered optimizer state is as large as the whole model's.
c10::IValue full_optimizer_state_dict(const torch::nn::Module& module,
                                      const torch::optim::Optimizer& optimizer,
                                      const FullStateDictOptions& options = {});
// Loads such a state (from full_optimizer_state_dict, or Python's FSDP2 or plain
// optimizer.state_dict() rekeyed by names) into the optimizer of a sharded module on any number
// of ranks: each rank keeps its rows. Not collective.
void load_full_optimizer_state_dict(const torch::nn::Module& module,
                                    torch::optim::Optimizer& optimizer, const c10::IValue& state);

struct ShardedCheckpointerOptions {
  std::string directory;  // visible to every rank (one host, or a shared file system)
  int keep_last = 2;
  std::chrono::milliseconds timeout = kDefaultTimeout;  // barriers and the broadcast
  CheckpointWriteOptions write;                          // test hooks
};

class ShardedCheckpointer : public TrainingCheckpointer {
 public:
  ShardedCheckpointer(ShardedCheckpointerOptions options, std::shared_ptr<ProcessGroup> pg);

  // Collective (Note [Sharded checkpoint]). Returns the checkpoint's folder.
  std::string save(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                   const TrainingProgress& progress) override;

  // Collective. Restores the model's shards and buffers and the optimizer's state from the
  // newest complete checkpoint, resharded when it was saved on another world size, and returns
  // its progress; nullopt when there is none.
  std::optional<TrainingProgress> load_latest(torch::nn::Module& model,
                                              torch::optim::Optimizer& optimizer) override;

  // Complete checkpoints' folders, newest first.
  std::vector<std::string> list() const override;
  std::string path_for_step(int64_t step) const override;

 private:
  void barrier();

  ShardedCheckpointerOptions options_;
  std::shared_ptr<ProcessGroup> pg_;
};

}  // namespace dpx
