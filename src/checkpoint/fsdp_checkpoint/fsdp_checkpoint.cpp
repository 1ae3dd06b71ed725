// Checkpoints of sharded modules: the full state dict's file, and the sharded checkpoint's save
// and bookkeeping (Note [Sharded checkpoint]); its loading is in fsdp_checkpoint_load.cpp.
#include "dpx/checkpoint/fsdp_checkpoint.h"

#include <unordered_map>

#include "dpx/checkpoint/python_format.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/runtime/files.h"
#include "checkpoint/fsdp_checkpoint/fsdp_checkpoint_parts.h"
#include "checkpoint/python_format/optimizer_state.h"
#include "checkpoint/python_format/torch_file.h"

namespace dpx {
namespace {

using Dict = c10::impl::GenericDict;

// What rank `rank` of `world` writes (Note [Sharded checkpoint], step 1).
c10::IValue part_of(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                    const TrainingProgress& progress, int rank, int world) {
  const auto shards = parameter_shards(model);
  auto tensors = Dict(c10::StringType::get(), c10::TensorType::get());
  auto layout = detail::any_dict();
  for (const auto& s : shards) {
    tensors.insert(s.name, s.param.detach());
    c10::List<int64_t> entry(c10::ArrayRef<int64_t>(s.full_sizes));
    entry.push_back(s.row_offset);  // the whole shape, then the first row of this shard
    layout.insert(s.name, entry);
  }
  auto buffers = Dict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& b : model.named_buffers()) buffers.insert(b.key(), b.value().detach());
  auto part = detail::any_dict();
  part.insert(detail::kPartParams, tensors);
  part.insert(detail::kPartLayout, layout);
  part.insert(detail::kPartBuffers, buffers);
  part.insert(detail::kPartOptimizer, detail::optimizer_state_dict(optimizer));
  part.insert(detail::kPartOptimizerNames, detail::optimizer_parameter_names(shards, optimizer));
  part.insert("rank", static_cast<int64_t>(rank));
  part.insert("world_size", static_cast<int64_t>(world));
  part.insert("epoch", progress.epoch);
  part.insert("step", progress.step);
  part.insert("sampler_position", progress.sampler_position);
  return part;
}

}  // namespace

namespace detail {

c10::impl::GenericDict any_dict() {
  return c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get());
}

c10::List<std::string> optimizer_parameter_names(const std::vector<ParameterShard>& shards,
                                                 const torch::optim::Optimizer& optimizer) {
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  for (const auto& s : shards) names.emplace(s.param.unsafeGetTensorImpl(), s.name);
  c10::List<std::string> out;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      auto it = names.find(p.unsafeGetTensorImpl());
      TORCH_CHECK(it != names.end(), "ShardedCheckpointer::save: the optimizer has a parameter "
                  "the model does not (sizes ", p.sizes(), ")");
      out.push_back(it->second);
    }
  }
  return out;
}

}  // namespace detail

void save_full_state_dict(const torch::nn::Module& module, const std::string& path) {
  auto pg = fsdp_process_group(module);
  const auto state = full_state_dict(module);  // rank 0's; empty elsewhere
  if (!pg || pg->rank() == 0) {
    if (detail::is_safetensors(path)) {
      safetensors_save(state, path);
    } else {
      auto dict = Dict(c10::StringType::get(), c10::TensorType::get());
      for (const auto& [name, t] : state) dict.insert(name, t);
      torch_save(dict, path);
    }
  }
  if (pg) pg->barrier()->wait();  // the file is there when any rank returns
}

void load_full_state_dict(torch::nn::Module& module, const std::string& path) {
  std::vector<std::pair<std::string, at::Tensor>> state;
  if (detail::is_safetensors(path)) {
    state = safetensors_load(path);
  } else {
    const auto value = torch_load(path);
    if (!value.isGenericDict()) throw CheckpointError(path + " does not hold a state dict");
    for (const auto& kv : value.toGenericDict()) {
      if (!kv.key().isString() || !kv.value().isTensor()) {
        throw CheckpointError(path + " holds a dict that is not a state dict (str -> tensor)");
      }
      state.emplace_back(kv.key().toStringRef(), kv.value().toTensor());
    }
  }
  load_full_state_dict(module, state);
}

ShardedCheckpointer::ShardedCheckpointer(ShardedCheckpointerOptions options,
                                         std::shared_ptr<ProcessGroup> pg)
    : options_(std::move(options)), pg_(std::move(pg)) {
  TORCH_CHECK(!options_.directory.empty(), "ShardedCheckpointer: directory is empty");
  TORCH_CHECK(pg_, "ShardedCheckpointer: the process group is null");
  TORCH_CHECK(options_.keep_last >= 1, "ShardedCheckpointer: keep_last must be at least 1, got ",
              options_.keep_last);
}

std::string ShardedCheckpointer::path_for_step(int64_t step) const {
  return detail::sharded_folders(options_.directory).path_for_step(step);
}

void ShardedCheckpointer::barrier() { pg_->barrier()->wait(options_.timeout); }

std::vector<std::string> ShardedCheckpointer::list() const {
  return detail::sharded_folders(options_.directory).list();
}

std::string ShardedCheckpointer::save(const torch::nn::Module& model,
                                      const torch::optim::Optimizer& optimizer,
                                      const TrainingProgress& progress) {
  const std::string final_dir = path_for_step(progress.step);
  const std::string partial = final_dir + detail::kPartialSuffix;
  if (pg_->rank() == 0) {  // a save of this step killed before left its parts: start afresh
    remove_tree(partial);
    make_dirs(partial);
  }
  barrier();
  const auto part = part_of(model, optimizer, progress, pg_->rank(), pg_->size());
  torch_save(part, partial + "/" + detail::part_name(pg_->rank(), pg_->size()), options_.write);
  barrier();
  if (pg_->rank() == 0) {
    const auto folders = detail::sharded_folders(options_.directory);
    folders.publish(partial, progress.step);
    // Also the .partial folders of saves that did not finish.
    folders.prune(options_.keep_last, detail::kPartialSuffix);
  }
  barrier();
  return final_dir;
}

}  // namespace dpx
