// Training checkpoints that PyTorch's torch.distributed.checkpoint reads and writes: one DCP
// directory per step, for fully_shard and for DDP (unsharded) modules, resumable on any world size.
//
//   dpx::DcpCheckpointer ckpt({.directory = "ckpt"}, pg);
//   ckpt.save(*net, optimizer, progress);              // ckpt/dcp-<step>/: .metadata, __<r>_0.distcp
//   auto resumed = ckpt.load_latest(*net, optimizer);  // on this world size or another
//   # Python, on any number of ranks:
//   # dcp.load({"model": msd, "optim": osd}, checkpoint_id="ckpt/dcp-<step>")
//
// Note [DCP training checkpoint]
// A checkpoint holds what dcp_save_state_dict writes with an optimizer (dcp.h): the model under
// "model.", the optimizer's state under "optim." as FSDP2's get_optimizer_state_dict names it;
// and the progress as three int objects, "progress.epoch", "progress.step" and
// "progress.sampler_position" (what Python's dcp.save({"progress": {"epoch": e, ...}}) writes).
// The progress lives inside the checkpoint rather than in a sidecar file so that one rule holds:
// a checkpoint is complete iff its .metadata exists (written last, by rank 0, after every rank's
// file). Python's dcp.load({"model": ..., "optim": ...}) ignores the entries it is not asked for.
// save():  1. every rank writes dcp-<step>.partial/ as dcp_save_state_dict does (.metadata last);
//          2. rank 0 renames it to dcp-<step> (StepDirectory::publish), syncs the directory,
//             removes all but the newest keep_last checkpoints and what killed saves left;
//          3. barrier.
// load_latest(): 1. rank 0 picks the newest checkpoint whose .metadata reads and holds the
//          progress (warning about, and skipping, the others), 2. broadcasts its step, 3. every
//          rank loads the model, the optimizer (its rows of each shard when fully_shard; whole
//          when not) and the progress from it.
// With async_save, save() copies the state to host memory and returns; a thread writes it, and
// the next save, load_latest or wait() reports its failure (Note [Asynchronous DCP save] in
// src/checkpoint/dcp/background_save.h).
// Unlike the Checkpointer, the random generators' states are not kept (as the ShardedCheckpointer).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpx/checkpoint/checkpoint_file.h"
#include "dpx/checkpoint/training_checkpointer.h"
#include "dpx/comm/process_group.h"
#include "dpx/store/types.h"

namespace dpx {

struct DcpCheckpointerOptions {
  std::string directory;  // visible to every rank (one host, or a shared file system)
  int keep_last = 2;
  std::chrono::milliseconds timeout = kDefaultTimeout;  // barriers and the collectives
  CheckpointWriteOptions write;                          // test hooks (each rank's file)
  // save() copies the model's and optimizer's state to host memory (memory for one more copy of
  // this rank's state) and returns; a thread writes the checkpoint while training goes on. The
  // next save(), load_latest() or wait() waits for it and throws on every rank if it failed.
  bool async_save = false;
};

namespace detail::dcp {
class BackgroundSave;
}

class DcpCheckpointer : public TrainingCheckpointer {
 public:
  // `pg`: the job's group; a fully_shard module must be sharded over it.
  DcpCheckpointer(DcpCheckpointerOptions options, std::shared_ptr<ProcessGroup> pg);
  // Waits for a save still being written (so the last checkpoint of a run that ends without
  // wait() is still published); a failure it had is printed, as a destructor cannot throw.
  ~DcpCheckpointer() override;

  // Collective (Note [DCP training checkpoint]). Returns the checkpoint's folder; with
  // async_save it is complete once wait() (or the next save) has returned.
  std::string save(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                   const TrainingProgress& progress) override;

  // Collective. Restores the model and the optimizer's state (SGD, Adam, AdamW) from the newest
  // complete checkpoint, resharded for this world size, and returns its progress; nullopt when
  // there is none.
  std::optional<TrainingProgress> load_latest(torch::nn::Module& model,
                                              torch::optim::Optimizer& optimizer) override;

  // Complete checkpoints' folders (those with a .metadata), newest first.
  std::vector<std::string> list() const override;
  std::string path_for_step(int64_t step) const override;

  // Collective: waits for the save in flight (async_save) and throws a CheckpointError on every
  // rank when it failed on any; returns at once when none is.
  void wait() override;
  // Whether this rank is still writing a save in the background (async_save); not collective.
  bool saving() const;

 private:
  void barrier();

  DcpCheckpointerOptions options_;
  std::shared_ptr<ProcessGroup> pg_;
  std::unique_ptr<detail::dcp::BackgroundSave> in_flight_;  // async_save's last save
  std::string in_flight_folder_;
};

}  // namespace dpx
