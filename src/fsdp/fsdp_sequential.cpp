// The entries of Sequentials kept aside for fully_shard's walk, and the guards in their place
// (Note [Sequential roots] in include/dpx/fsdp/fsdp_sequential.h).
#include "dpx/fsdp/fsdp_sequential.h"

#include <torch/nn/modules/common.h>

#include <mutex>
#include <string>
#include <unordered_map>

namespace dpx::detail {
namespace {

// In a sharded entry's place: the Sequential's own forward reaches it and fails, naming it.
// Up to four tensor arguments, so that a first entry taking several still gets this message.
class SequentialGuardImpl : public torch::nn::Module {
 public:
  explicit SequentialGuardImpl(std::string message)
      : torch::nn::Module("dpx::SequentialGuard"), message_(std::move(message)) {}
  at::Tensor forward(const at::Tensor&, const at::Tensor& = {}, const at::Tensor& = {},
                     const at::Tensor& = {}) {
    TORCH_CHECK(false, message_);
  }

 protected:
  FORWARD_HAS_DEFAULT_ARGS({1, torch::nn::AnyValue(at::Tensor())},
                           {2, torch::nn::AnyValue(at::Tensor())},
                           {3, torch::nn::AnyValue(at::Tensor())})

 private:
  std::string message_;
};

struct Kept {
  std::weak_ptr<torch::nn::Module> seq;
  std::vector<torch::nn::AnyModule> entries;  // as they were before the guards
};

std::mutex mutex;
std::unordered_map<const torch::nn::SequentialImpl*, Kept> kept;  // guarded by mutex

std::string guard_message(const std::string& where, const torch::nn::Module& entry) {
  return "fully_shard: " + where + " (" + entry.name() + ") was called by the "
         "torch::nn::Sequential's own forward, which would run it on its parameter shards. Call "
         "the model through the handle that fully_shard returned for it (auto model = "
         "dpx::fully_shard(seq, pg); model(x)): the handle calls each unit through fully_shard's "
         "steps (docs/fsdp.md)";
}

}  // namespace

torch::nn::AnyModule& sequential_entry(torch::nn::SequentialImpl& seq, std::size_t i) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = kept.find(&seq);
    if (it != kept.end() && !it->second.seq.expired()) return it->second.entries.at(i);
  }
  return *(seq.begin() + static_cast<std::ptrdiff_t>(i));
}

void guard_sequentials(torch::nn::Module& module) {
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = kept.begin(); it != kept.end();) {  // of modules gone since
    it = it->second.seq.expired() ? kept.erase(it) : std::next(it);
  }
  for (const auto& item : module.named_modules("", /*include_self=*/true)) {
    auto seq = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(item.value());
    if (!seq || kept.count(seq.get())) continue;
    Kept k{seq, {seq->begin(), seq->end()}};
    bool guarded = false;
    for (std::size_t i = 0; i < k.entries.size(); ++i) {
      const auto& entry = *k.entries[i].ptr();
      if (entry.parameters().empty()) continue;  // nothing sharded: the Sequential may call it
      const std::string where = "entry " + (item.key().empty() ? "" : item.key() + ".") +
                                std::to_string(i);
      *(seq->begin() + static_cast<std::ptrdiff_t>(i)) =
          torch::nn::AnyModule(std::make_shared<SequentialGuardImpl>(guard_message(where, entry)));
      guarded = true;
    }
    if (guarded) kept.emplace(seq.get(), std::move(k));
  }
}

}  // namespace dpx::detail
