// Which modules are units and which unit shards each parameter, for the whole process: a
// LibTorch module has no place to keep fully_shard's state, so it is found by the module's
// address (as FSDP2 finds its state through the module).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace dpx::detail {

class FsdpUnit;

class UnitRegistry {
 public:
  static UnitRegistry& instance();

  // The unit made of `module`; null when none (or when the module it was made of is gone).
  std::shared_ptr<FsdpUnit> unit_of(const torch::nn::Module& module);
  // The unit that shards `param`; null when none.
  std::shared_ptr<FsdpUnit> holder_of(const at::Tensor& param);
  void add(const std::shared_ptr<torch::nn::Module>& module, const std::shared_ptr<FsdpUnit>& unit);

 private:
  // Units outlive their module only until the next add(): they hold the parameters' tensors.
  void prune_locked();

  struct Entry {
    std::weak_ptr<torch::nn::Module> module;
    std::shared_ptr<FsdpUnit> unit;
    int pid = 0;  // of the process that made the unit (Note [Units across fork])
  };
  std::mutex mutex_;
  std::unordered_map<const torch::nn::Module*, Entry> units_;
  std::unordered_map<const c10::TensorImpl*, std::weak_ptr<FsdpUnit>> holders_;
};

// The units of `module`'s tree (itself first when it is one), each once; only `module`'s own
// without `recurse`.
std::vector<std::shared_ptr<FsdpUnit>> units_in(const torch::nn::Module& module, bool recurse);

}  // namespace dpx::detail
