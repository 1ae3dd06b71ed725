#include "checkpoint/checkpointer/torch_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "checkpoint/python_format/optimizer_state.h"
#include "runtime/cuda/rng_state.h"
#include "dpx/checkpoint/python_format.h"

namespace dpx::detail {

void save_torch_checkpoint(const std::string& path, const torch::nn::Module& model,
                           const torch::optim::Optimizer& optimizer,
                           const TrainingProgress& progress, const CheckpointWriteOptions& write) {
  auto model_state = c10::impl::GenericDict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, t] : state_dict(model)) model_state.insert(name, t);
  auto d = c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
  d.insert("model", model_state);
  d.insert("optimizer", optimizer_state_dict(optimizer));
  d.insert("epoch", progress.epoch);
  d.insert("step", progress.step);
  d.insert("sampler_position", progress.sampler_position);
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    d.insert("rng_cpu", gen.get_state());
  }
  d.insert("rng_cuda", c10::List<at::Tensor>(cuda_rng_states()));  // Note [CUDA random state]
  torch_save(d, path, write);
}

c10::IValue read_torch_checkpoint(const std::string& path) {
  auto v = torch_load(path);
  if (!v.isGenericDict()) throw CheckpointError("checkpoint " + path + " does not hold a dict");
  for (const char* key : {"model", "optimizer", "epoch", "step", "sampler_position", "rng_cpu"}) {
    if (!v.toGenericDict().contains(key)) {
      throw CheckpointError("checkpoint " + path + " has no '" + key + "' entry");
    }
  }
  return v;
}

TrainingProgress load_torch_checkpoint(const c10::IValue& checkpoint, const std::string& path,
                                       torch::nn::Module& model,
                                       torch::optim::Optimizer& optimizer) {
  // A wrong type anywhere (toInt() of a string, ...) is a c10::Error: reported as the file's fault.
  try {
    const auto d = checkpoint.toGenericDict();
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& kv : d.at("model").toGenericDict()) {
      tensors.emplace_back(kv.key().toStringRef(), kv.value().toTensor());
    }
    load_state_dict(model, tensors);
    load_optimizer_state_dict(optimizer, d.at("optimizer"));
    TrainingProgress progress;
    progress.epoch = d.at("epoch").toInt();
    progress.step = d.at("step").toInt();
    progress.sampler_position = d.at("sampler_position").toInt();
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(d.at("rng_cpu").toTensor());
    }
    // Absent from files of dpx before it kept them, and from files others wrote.
    if (d.contains("rng_cuda")) {
      std::vector<at::Tensor> states;
      for (const auto& state : d.at("rng_cuda").toListRef()) states.push_back(state.toTensor());
      set_cuda_rng_states(states);
    }
    return progress;
  } catch (const c10::Error& e) {
    throw CheckpointError("checkpoint " + path + ": " + e.what_without_backtrace());
  }
}

}  // namespace dpx::detail
