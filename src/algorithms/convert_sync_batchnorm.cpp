// convert_sync_batchnorm: see Note [Converting in C++] in sync_batch_norm.h.
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>

#include <string>

#include "dpx/algorithms/sync_batch_norm.h"

namespace dpx {
namespace {

using torch::nn::Module;

template <class Impl>
std::shared_ptr<SyncBatchNormImpl> try_convert(const std::shared_ptr<Module>& module,
                                               const std::shared_ptr<ProcessGroup>& group) {
  auto bn = std::dynamic_pointer_cast<Impl>(module);
  if (!bn) return nullptr;
  const auto& o = bn->options;
  SyncBatchNormOptions options(o.num_features());
  options.eps = o.eps();
  options.momentum = o.momentum() ? std::optional<double>(*o.momentum()) : std::nullopt;
  options.affine = o.affine();
  options.track_running_stats = o.track_running_stats();
  BatchNormTensors tensors{bn->weight, bn->bias, bn->running_mean, bn->running_var,
                           bn->num_batches_tracked};
  auto sync = std::make_shared<SyncBatchNormImpl>(options, group, std::move(tensors));
  sync->train(bn->is_training());
  return sync;
}

// A SyncBatchNorm sharing the tensors of `module` when it is a torch::nn::BatchNorm{1,2,3}d.
std::shared_ptr<SyncBatchNormImpl> convert(const std::shared_ptr<Module>& module,
                                           const std::shared_ptr<ProcessGroup>& group) {
  if (auto s = try_convert<torch::nn::BatchNorm1dImpl>(module, group)) return s;
  if (auto s = try_convert<torch::nn::BatchNorm2dImpl>(module, group)) return s;
  return try_convert<torch::nn::BatchNorm3dImpl>(module, group);
}

bool is_batch_norm(const std::shared_ptr<Module>& m) {
  return std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(m) ||
         std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(m) ||
         std::dynamic_pointer_cast<torch::nn::BatchNorm3dImpl>(m);
}

// Finds, before anything changes, a BatchNorm whose caller cannot be redirected.
void check_convertible(const Module& parent, const std::string& path) {
  const bool sequential = dynamic_cast<const torch::nn::SequentialImpl*>(&parent) != nullptr;
  for (const auto& child : parent.named_children()) {
    const auto child_path = path.empty() ? child.key() : path + "." + child.key();
    TORCH_CHECK(sequential || !is_batch_norm(child.value()),
                "convert_sync_batchnorm: '", child_path, "' (", child.value()->name(),
                ") is held by a ", parent.name(), ", whose forward() calls it through its own ",
                "member, which a C++ program cannot redirect; declare it as dpx::SyncBatchNorm ",
                "(it computes plain batch normalisation until it is given a process group), or ",
                "hold it in a torch::nn::Sequential");
    check_convertible(*child.value(), child_path);
  }
}

void convert_in_place(Module& parent, const std::shared_ptr<ProcessGroup>& group) {
  if (auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(&parent)) {
    // A Sequential's forward runs its AnyModule list, and named_children() follows that order.
    const auto names = seq->named_children().keys();
    size_t i = 0;
    for (auto it = seq->begin(); it != seq->end(); ++it, ++i) {
      if (auto sync = convert(it->ptr(), group)) {
        *it = torch::nn::AnyModule(SyncBatchNorm(sync));
        seq->replace_module(names[i], SyncBatchNorm(sync));
      }
    }
  }
  for (const auto& child : parent.children()) {
    if (auto sync = std::dynamic_pointer_cast<SyncBatchNormImpl>(child)) {
      sync->set_process_group(group);
    } else {
      convert_in_place(*child, group);
    }
  }
}

}  // namespace

std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module,
                                               std::shared_ptr<ProcessGroup> group) {
  TORCH_CHECK(module, "convert_sync_batchnorm: the module is null");
  if (auto sync = convert(module, group)) return sync;
  if (auto sync = std::dynamic_pointer_cast<SyncBatchNormImpl>(module)) {
    sync->set_process_group(std::move(group));
    return module;
  }
  check_convertible(*module, "");
  convert_in_place(*module, group);
  return module;
}

}  // namespace dpx
