// Where a unit meets autograd (Note [Unit iteration] steps 1-3): a node in front of its inputs
// whose backward runs once the unit's backward is done, and hooks on its outputs that run as
// its backward starts.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include "runtime/compat/autograd.h"
#include "fsdp/fsdp_unit.h"

namespace dpx::detail {
namespace {

// The identity on a unit's inputs. Autograd runs it once their gradients are complete, which is
// after the unit's own backward (its nodes were recorded later, and so run first, and the
// gradient accumulators of its parameters run as soon as they are ready): so the unit's
// gradients are all in .grad then. PyTorch's FSDP2 does the same (RegisterPostBackwardFunction).
class PostBackward : public torch::autograd::Node {
 public:
  PostBackward(std::weak_ptr<FsdpUnit> unit, torch::autograd::edge_list edges)
      : Node(std::move(edges)), unit_(std::move(unit)) {}

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (auto unit = unit_.lock()) unit->post_backward();
    return std::move(grads);
  }
  std::string name() const override { return "dpx::FsdpPostBackward"; }

 private:
  std::weak_ptr<FsdpUnit> unit_;
};

}  // namespace

std::vector<at::Tensor> FsdpUnit::attach_post_backward(std::vector<at::Tensor> inputs) {
  std::vector<std::size_t> tracked;
  torch::autograd::edge_list edges;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined() && inputs[i].requires_grad()) {
      tracked.push_back(i);
      edges.push_back(torch::autograd::impl::gradient_edge(inputs[i]));
    }
  }
  if (tracked.empty()) return inputs;  // the end-of-backward callback runs post_backward
  auto node = compat::make_node<PostBackward>(weak_from_this(), std::move(edges));
  for (auto i : tracked) {
    auto passed = inputs[i].detach();  // the same data, a new history: through the node
    torch::autograd::create_gradient_edge(passed, node);
    inputs[i] = std::move(passed);
  }
  return inputs;
}

void FsdpUnit::hook_outputs(const std::vector<at::Tensor>& outputs) {
  std::weak_ptr<FsdpUnit> weak = weak_from_this();
  for (const auto& t : outputs) {
    if (!t.defined() || !t.requires_grad()) continue;
    t.register_hook([weak](const at::Tensor&) {
      if (auto unit = weak.lock()) unit->pre_backward();
    });
  }
}

}  // namespace dpx::detail
