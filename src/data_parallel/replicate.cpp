#include "dpx/data_parallel/replicate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/function.h>

#include "runtime/compat/autograd.h"
#include "data_parallel/replicate_detail.h"

namespace dpx {
namespace detail {
namespace {

using torch::autograd::Edge;

// The grad_fn of a differentiable replica parameter: hands the gradient to the original
// parameter (or to the copy that brought it to another device), where the engine sums the
// contributions of all replicas before accumulating once, as Broadcast's backward does.
struct ReplicateBackward : torch::autograd::Node {
  explicit ReplicateBackward(Edge source) : Node(torch::autograd::edge_list{std::move(source)}) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    return std::move(grads);
  }
  std::string name() const override { return "dpx::ReplicateBackward"; }
};

// Restores the default CPU generator when it goes out of scope
// (Note [Clone keeps the generator] in replicate_detail.h).
class KeepCpuGenerator {
 public:
  KeepCpuGenerator() : generator_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    state_ = generator_.get_state();
  }
  ~KeepCpuGenerator() {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_state(state_);
  }

 private:
  at::Generator generator_;
  at::Tensor state_;
};

void share_version_counter(const at::Tensor& replica, const at::Tensor& original) {
  replica.unsafeGetTensorImpl()->set_version_counter(
      original.unsafeGetTensorImpl()->version_counter());
}

void link_parameter(at::Tensor& replica, const at::Tensor& original, torch::Device device,
                    ParamLink link) {
  const bool alias = original.device() == device;
  const bool differentiable = link == ParamLink::kDifferentiable && original.requires_grad() &&
                              at::GradMode::is_enabled();
  at::Tensor source;
  if (alias) {
    source = original;
  } else if (differentiable) {
    source = original.to(device);  // recorded by autograd: the gradient comes back to `original`
  } else {
    at::NoGradGuard no_grad;
    source = original.to(device);
  }
  if (replica.grad_fn()) {
    torch::autograd::impl::set_gradient_edge(replica, Edge());  // a leaf again
  }
  replica.set_data(source);
  if (alias) {
    // In-place changes of the original (an optimizer step) between this forward and its
    // backward are then caught as they would be without DataParallel.
    share_version_counter(replica, original);
  }
  replica.set_requires_grad(link == ParamLink::kLeaf && original.requires_grad());
  if (differentiable) {
    auto node = compat::make_node<ReplicateBackward>(torch::autograd::impl::gradient_edge(source));
    torch::autograd::create_gradient_edge(replica, std::move(node));
  }
}

void sync_buffer(at::Tensor& replica, const at::Tensor& original, torch::Device device,
                 bool share) {
  at::NoGradGuard no_grad;
  if (share && original.device() == device) {
    replica.set_data(original);
    share_version_counter(replica, original);
  } else if (replica.sizes() == original.sizes() && replica.dtype() == original.dtype() &&
             replica.device() == device && !replica.is_alias_of(original)) {
    replica.copy_(original);
  } else {
    replica.set_data(original.to(device, /*non_blocking=*/false, /*copy=*/true));
  }
}

template <typename Dict>
bool same_keys(const Dict& a, const Dict& b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].key() != b[i].key()) {
      return false;
    }
  }
  return true;
}

void sync_training_flags(torch::nn::Module& original, torch::nn::Module& replica) {
  if (replica.is_training() != original.is_training()) {
    replica.train(original.is_training());  // recursive; children fixed below
  }
  auto originals = original.modules(/*include_self=*/false);
  auto replicas = replica.modules(/*include_self=*/false);
  // modules() lists parents before children, so a later call never undoes an earlier one.
  for (size_t i = 0; i < originals.size(); ++i) {
    if (replicas[i]->is_training() != originals[i]->is_training()) {
      replicas[i]->train(originals[i]->is_training());
    }
  }
}

}  // namespace

std::shared_ptr<torch::nn::Module> clone_module(const torch::nn::Module& module,
                                                torch::Device device) {
  KeepCpuGenerator keep;
  return module.clone(device);
}

bool same_structure(const torch::nn::Module& original, const torch::nn::Module& replica) {
  return same_keys(original.named_parameters(), replica.named_parameters()) &&
         same_keys(original.named_buffers(), replica.named_buffers()) &&
         original.modules(false).size() == replica.modules(false).size();
}

void sync_replica(torch::nn::Module& original, torch::nn::Module& replica, torch::Device device,
                  bool share_buffers, ParamLink link) {
  TORCH_INTERNAL_ASSERT(same_structure(original, replica),
                        "a replica no longer matches its module; clone it again");
  auto params = original.named_parameters();
  auto replica_params = replica.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    link_parameter(replica_params[i].value(), params[i].value(), device, link);
  }
  auto buffers = original.named_buffers();
  auto replica_buffers = replica.named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) {
    sync_buffer(replica_buffers[i].value(), buffers[i].value(), device, share_buffers);
  }
  sync_training_flags(original, replica);
}

torch::Device module_device(const torch::nn::Module& module, torch::Device fallback) {
  auto params = module.parameters();
  if (!params.empty()) {
    return params.front().device();
  }
  auto buffers = module.buffers();
  return buffers.empty() ? fallback : buffers.front().device();
}

}  // namespace detail

std::vector<std::shared_ptr<torch::nn::Module>> replicate(
    const std::shared_ptr<torch::nn::Module>& module, const std::vector<torch::Device>& devices,
    const ReplicateOptions& options) {
  TORCH_CHECK(module, "replicate: the module is null");
  TORCH_CHECK(!devices.empty(), "replicate: expected at least one device");
  const auto home = detail::module_device(*module, devices.front());
  const auto link = options.detach ? detail::ParamLink::kDetached
                                   : detail::ParamLink::kDifferentiable;
  std::vector<std::shared_ptr<torch::nn::Module>> replicas;
  for (size_t i = 0; i < devices.size(); ++i) {
    replicas.push_back(detail::clone_module(*module, devices[i]));
    detail::sync_replica(*module, *replicas.back(), devices[i], i == 0 && devices[i] == home,
                         link);
  }
  return replicas;
}

}  // namespace dpx
