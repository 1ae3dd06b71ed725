// What every checkpointer of a training loop does, whatever it writes: save the model, the
// optimizer and where training stands at a step; resume from the newest complete save.
//
//   std::unique_ptr<dpx::TrainingCheckpointer> ckpt;
//   if (sharded) ckpt = std::make_unique<dpx::ShardedCheckpointer>(sharded_options, pg);
//   else         ckpt = std::make_unique<dpx::Checkpointer>(options, pg);
//   auto resumed = ckpt->load_latest(model, optimizer);  // nullopt: a fresh start
//   ...
//   ckpt->save(model, optimizer, progress);
//
// Checkpointer (checkpointer.h): rank 0 writes one file per step, every rank loads it.
// ShardedCheckpointer (fsdp_checkpoint.h): every rank of a fully_shard module writes its shards
// into one folder per step, and a load reshards them for the world size it runs on.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dpx {

// Where training stands; what a resumed run continues from.
struct TrainingProgress {
  int64_t epoch = 0;             // the epoch in progress (or the next one, at an epoch's end)
  int64_t step = 0;              // optimizer steps taken so far, over all epochs
  int64_t sampler_position = 0;  // samples of `epoch` this rank consumed (DistributedSampler::resume)
};

class TrainingCheckpointer {
 public:
  virtual ~TrainingCheckpointer() = default;

  // Collective. Writes the checkpoint of `progress.step` and returns its path (a file or a
  // folder) on every rank; when it returns, the checkpoint is complete on disk (one that saves
  // in the background: once wait() returns), and a save cut short at any point leaves the
  // previous ones loadable.
  virtual std::string save(const torch::nn::Module& model,
                           const torch::optim::Optimizer& optimizer,
                           const TrainingProgress& progress) = 0;

  // Collective. Restores the model and optimizer from the newest complete checkpoint and
  // returns its progress; nullopt when there is none (a fresh start).
  virtual std::optional<TrainingProgress> load_latest(torch::nn::Module& model,
                                                      torch::optim::Optimizer& optimizer) = 0;

  // The checkpoints in the directory, newest first.
  virtual std::vector<std::string> list() const = 0;

  // Where the checkpoint of `step` is (or would be) written.
  virtual std::string path_for_step(int64_t step) const = 0;

  // Collective. Waits until the last save is complete on disk and throws its failure, if it had
  // one: a checkpointer that saves in the background (DcpCheckpointer's async_save) reports
  // there what went wrong after save() returned. Call it once training ends. A checkpointer
  // whose save() returns complete has nothing to wait for.
  virtual void wait() {}
};

}  // namespace dpx
