// Saving and resuming training: rank 0 writes, every rank loads the same checkpoint.
//
// Note [Checkpoint protocol]
// save():  1. rank 0 serializes model, optimizer, progress and its CPU and CUDA RNG states
//             (Note [CUDA random state] in src/runtime/cuda/rng_state.h),
//          2. writes checkpoint-<step>.dpx atomically (checkpoint_file.h), deletes all but the
//             newest keep_last ones and temporary files that killed writers left behind,
//          3. every rank waits at a barrier, so no rank runs ahead of a checkpoint in progress.
// load_latest(): 1. barrier, 2. rank 0 picks the newest file whose checksum holds (reporting
//          and skipping damaged ones), 3. broadcasts its step, 4. every rank loads that file.
// The directory must be visible to every rank (one host, or a shared file system).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpx/checkpoint/checkpoint_file.h"
#include "dpx/checkpoint/training_checkpointer.h"
#include "dpx/comm/process_group.h"
#include "dpx/store/types.h"

namespace dpx {

// kDpx: checkpoint-<step>.dpx, a LibTorch archive behind a header with a CRC32 (checkpoint_file.h).
// kTorchSave: checkpoint-<step>.pt, a torch.save file Python opens with torch.load(path,
// weights_only=True): {'model': state_dict, 'optimizer': Python's optimizer.state_dict() layout
// (SGD, Adam, AdamW), 'epoch', 'step', 'sampler_position': int, 'rng_cpu': uint8 tensor,
// 'rng_cuda': list of uint8 tensors, as torch.cuda.get_rng_state_all() (empty without a GPU)}. Its
// checksums are the zip's CRC-32 per record, checked on load (see docs/checkpoint.md).
enum class CheckpointFormat { kDpx, kTorchSave };

struct CheckpointerOptions {
  std::string directory;
  int keep_last = 3;
  std::chrono::milliseconds timeout = kDefaultTimeout;  // barriers and the broadcast
  // Where load_latest() puts the loaded tensors (PyTorch's map_location, one device): nullopt
  // keeps the device each was saved from; cpu, cuda:N, or cuda for GPU LOCAL_RANK
  // (dpx::cuda::local_device). E.g. a checkpoint saved on cuda:0 loads onto cuda:1 or the CPU.
  std::optional<c10::Device> map_location;
  CheckpointFormat format = CheckpointFormat::kDpx;
  CheckpointWriteOptions write;                         // test hooks
};

class Checkpointer : public TrainingCheckpointer {
 public:
  // `process_group` may be null for a single process.
  Checkpointer(CheckpointerOptions options, std::shared_ptr<ProcessGroup> process_group);

  // Collective. Returns the path written (on every rank).
  std::string save(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                   const TrainingProgress& progress) override;

  // Collective. Restores model, optimizer and the RNGs from the newest good checkpoint and
  // returns its progress; nullopt when there is none (a fresh start).
  std::optional<TrainingProgress> load_latest(torch::nn::Module& model,
                                              torch::optim::Optimizer& optimizer) override;

  // Checkpoint files in the directory, newest first (not verified).
  std::vector<std::string> list() const override;

  std::string path_for_step(int64_t step) const override;

 private:
  void barrier();
  int64_t pick_latest_good() const;

  CheckpointerOptions options_;
  std::shared_ptr<ProcessGroup> pg_;
  int rank_ = 0;
  int world_ = 1;
};

}  // namespace dpx
