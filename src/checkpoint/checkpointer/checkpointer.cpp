#include "dpx/checkpoint/checkpointer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <sstream>

#include "dpx/errors.h"
#include "dpx/runtime/cuda.h"
#include "checkpoint/checkpointer/torch_checkpoint.h"
#include "checkpoint/step_directory.h"
#include "comm/coordination/control.h"
#include "runtime/cuda/rng_state.h"

namespace dpx {
namespace {

constexpr const char* kPrefix = "checkpoint-";
constexpr int kStepDigits = 12;  // checkpoint-000000000042.dpx: names sort as steps do

detail::StepDirectory files_of(const CheckpointerOptions& options) {
  return {options.directory, kPrefix,
          options.format == CheckpointFormat::kTorchSave ? ".pt" : ".dpx", kStepDigits};
}

void write_scalar(torch::serialize::OutputArchive& a, const char* key, int64_t v) {
  a.write(key, torch::tensor(v, torch::kInt64));
}

int64_t read_scalar(torch::serialize::InputArchive& a, const char* key) {
  torch::Tensor t;
  a.read(key, t);
  return t.item<int64_t>();
}

std::string serialize(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                      const TrainingProgress& progress) {
  torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
  model.save(model_archive);
  optimizer.save(optimizer_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  write_scalar(archive, "epoch", progress.epoch);
  write_scalar(archive, "step", progress.step);
  write_scalar(archive, "sampler_position", progress.sampler_position);
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write("rng_cpu", gen.get_state());
  }
  archive.write("rng_cuda", c10::List<at::Tensor>(detail::cuda_rng_states()));
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

TrainingProgress deserialize(const std::string& payload, torch::nn::Module& model,
                             torch::optim::Optimizer& optimizer,
                             const std::optional<c10::Device>& map_location) {
  torch::serialize::InputArchive archive, model_archive, optimizer_archive;
  if (map_location) {
    archive.load_from(payload.data(), payload.size(), cuda::local_device(*map_location));
  } else {
    archive.load_from(payload.data(), payload.size());
  }
  archive.read("model", model_archive);
  archive.read("optimizer", optimizer_archive);
  model.load(model_archive);
  optimizer.load(optimizer_archive);
  TrainingProgress progress;
  progress.epoch = read_scalar(archive, "epoch");
  progress.step = read_scalar(archive, "step");
  progress.sampler_position = read_scalar(archive, "sampler_position");
  torch::Tensor rng;
  archive.read("rng_cpu", rng);
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng.cpu());  // a map_location may have moved it
  }
  c10::IValue rng_cuda;  // absent from checkpoints of dpx before it kept them
  if (archive.try_read("rng_cuda", rng_cuda)) {
    detail::set_cuda_rng_states(rng_cuda.toTensorVector());  // Note [CUDA random state]
  }
  return progress;
}

}  // namespace

Checkpointer::Checkpointer(CheckpointerOptions options,
                           std::shared_ptr<ProcessGroup> process_group)
    : options_(std::move(options)), pg_(std::move(process_group)) {
  TORCH_CHECK(!options_.directory.empty(), "Checkpointer: options.directory is empty");
  TORCH_CHECK(options_.keep_last >= 1, "Checkpointer: keep_last must be >= 1, got ",
              options_.keep_last);
  if (pg_) {
    rank_ = pg_->rank();
    world_ = pg_->size();
  }
  if (rank_ == 0) {
    try {
      files_of(options_).create();
    } catch (const CheckpointError& e) {
      throw CheckpointError(where(rank_, world_) + e.what());
    }
  }
}

std::string Checkpointer::path_for_step(int64_t step) const {
  return files_of(options_).path_for_step(step);
}

std::vector<std::string> Checkpointer::list() const { return files_of(options_).list(); }

void Checkpointer::barrier() {
  if (pg_ && world_ > 1) {
    pg_->barrier()->wait(options_.timeout);
  }
}

std::string Checkpointer::save(const torch::nn::Module& model,
                               const torch::optim::Optimizer& optimizer,
                               const TrainingProgress& progress) {
  const std::string path = path_for_step(progress.step);
  if (rank_ == 0) {
    if (options_.format == CheckpointFormat::kTorchSave) {
      detail::save_torch_checkpoint(path, model, optimizer, progress, options_.write);
    } else {
      write_checkpoint_file(path, serialize(model, optimizer, progress), options_.write);
    }
    // Also the temporary files of writers killed mid-save (only rank 0 writes, and it is done).
    files_of(options_).prune(options_.keep_last, ".tmp.");
  }
  barrier();
  return path;
}

int64_t Checkpointer::pick_latest_good() const {
  for (const auto& path : list()) {
    try {
      if (options_.format == CheckpointFormat::kTorchSave) {
        detail::read_torch_checkpoint(path);
      } else {
        read_checkpoint_file(path);
      }
      return files_of(options_).step_of(path.substr(path.find_last_of('/') + 1));
    } catch (const CheckpointError& e) {
      TORCH_WARN(where(rank_, world_), e.what(), "; skipping it and trying the previous one");
    }
  }
  return -1;
}

std::optional<TrainingProgress> Checkpointer::load_latest(torch::nn::Module& model,
                                                          torch::optim::Optimizer& optimizer) {
  barrier();
  auto step = torch::tensor({rank_ == 0 ? pick_latest_good() : int64_t{-1}}, torch::kInt64);
  if (pg_ && world_ > 1) {
    detail::control_broadcast(*pg_, step, 0, options_.timeout);  // the group may be on a GPU
  }
  const int64_t chosen = step.item<int64_t>();
  if (chosen < 0) {
    return std::nullopt;
  }
  const std::string path = path_for_step(chosen);
  std::string payload;
  c10::IValue torch_checkpoint;
  try {
    if (options_.format == CheckpointFormat::kTorchSave) {
      torch_checkpoint = detail::read_torch_checkpoint(path);
    } else {
      payload = read_checkpoint_file(path);
    }
  } catch (const CheckpointError& e) {
    throw CheckpointError(where(rank_, world_) + e.what() +
                          " (rank 0 read it fine: is the directory shared by every rank?)");
  }
  if (options_.format == CheckpointFormat::kTorchSave) {
    // Tensors are copied into the model's and optimizer's own tensors, so they land on the
    // model's device whatever map_location says.
    return detail::load_torch_checkpoint(torch_checkpoint, path, model, optimizer);
  }
  return deserialize(payload, model, optimizer, options_.map_location);
}

}  // namespace dpx
