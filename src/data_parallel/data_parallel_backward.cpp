#include "data_parallel/data_parallel_backward.h"

#include <torch/csrc/autograd/function.h>

#include "runtime/compat/autograd.h"
#include "runtime/cuda/reduce_add.h"
#include "dpx/data_parallel/scatter_gather.h"
#include "data_parallel/parallel_apply_threads.h"

namespace dpx::detail {
namespace {

using torch::autograd::variable_list;

// One gathered output tensor: which replica outputs it came from and where each one sits.
struct Slot {
  size_t k;                      // index into ReplicaRun::outputs[r]
  bool scalar;                   // replicas returned 0-dim tensors, gathered as a vector
  std::vector<int64_t> offsets;  // [replica] start along dim in the gathered tensor
};

class DataParallelBackward : public torch::autograd::Node {
 public:
  DataParallelBackward(std::shared_ptr<ReplicaThreads> threads, ReplicaRun run,
                       torch::autograd::edge_list edges)
      : Node(std::move(edges)), threads_(std::move(threads)), run_(std::move(run)) {
    // Chunk lengths of the inputs, kept apart from the leaves that release_variables() drops.
    input_lengths_.resize(run_.leaves.size());
    for (size_t r = 0; r < run_.leaves.size(); ++r) {
      for (size_t j = run_.params.size(); j < run_.leaves[r].size(); ++j) {
        input_lengths_[r].push_back(run_.leaves[r][j].size(run_.dim));
      }
    }
  }

  void add_slot(Slot slot) { slots_.push_back(std::move(slot)); }

  std::string name() const override { return "dpx::DataParallelBackward"; }

  void release_variables() override {
    run_.outputs.clear();
    run_.leaves.clear();
    released_ = true;
  }

  variable_list apply(variable_list&& grads) override {
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "DataParallel does not support double backward (create_graph=true): each "
                "replica's gradient is computed in its own graph");
    TORCH_CHECK(!released_,
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Specify retain_graph=true the "
                "first time you call backward.");
    std::vector<variable_list> per_replica(run_.devices.size());
    if (run_.one_engine_call) {
      per_replica = backward_all_replicas(grads);
    } else {
      threads_->run(run_.devices, [&](int64_t r) { per_replica[r] = backward_replica(r, grads); });
    }
    return combine(per_replica);
  }

 private:
  // This replica's share of the gradient of slot s.
  at::Tensor slice(const at::Tensor& grad, const Slot& slot, int64_t r) const {
    if (slot.scalar) {
      return grad.select(0, r);
    }
    const auto& out = run_.outputs[r][slot.k];
    return grad.narrow(run_.dim, slot.offsets[r], out.size(run_.dim));
  }

  // Replica r's outputs that take part in the backward, with their share of the gradients.
  void add_roots(int64_t r, const variable_list& grads, variable_list& outputs,
                 variable_list& grad_outputs) const {
    for (size_t s = 0; s < slots_.size(); ++s) {
      const auto& out = run_.outputs[r][slots_[s].k];
      if (grads[s].defined() && out.requires_grad()) {
        outputs.push_back(out);
        grad_outputs.push_back(slice(grads[s], slots_[s], r).to(out.device()));
      }
    }
  }

  static variable_list grad_of(const variable_list& outputs, const variable_list& leaves,
                               const variable_list& grad_outputs) {
    if (outputs.empty() || leaves.empty()) return variable_list(leaves.size());
    return torch::autograd::grad(outputs, leaves, grad_outputs, /*retain_graph=*/true,
                                 /*create_graph=*/false, /*allow_unused=*/true);
  }

  variable_list backward_replica(int64_t r, const variable_list& grads) const {
    variable_list outputs, grad_outputs;
    add_roots(r, grads, outputs, grad_outputs);
    return grad_of(outputs, run_.leaves[r], grad_outputs);
  }

  // Every replica's graph in one reentrant engine call (Note [Parallel backward on CUDA]).
  std::vector<variable_list> backward_all_replicas(const variable_list& grads) const {
    const auto n = static_cast<int64_t>(run_.devices.size());
    variable_list outputs, grad_outputs, leaves;
    for (int64_t r = 0; r < n; ++r) {
      add_roots(r, grads, outputs, grad_outputs);
      leaves.insert(leaves.end(), run_.leaves[r].begin(), run_.leaves[r].end());
    }
    const variable_list all = grad_of(outputs, leaves, grad_outputs);
    std::vector<variable_list> per_replica(n);
    auto next = all.begin();
    for (int64_t r = 0; r < n; ++r) {
      per_replica[r].assign(next, next + run_.leaves[r].size());
      next += run_.leaves[r].size();
    }
    return per_replica;
  }

  variable_list combine(const std::vector<variable_list>& per_replica) const {
    const size_t num_params = run_.params.size();
    variable_list result(num_params + run_.inputs.size());
    // Note [One NCCL reduce per dtype] in src/runtime/cuda/reduce_add.h; what it leaves, adds below.
    if (run_.devices.size() > 1 && run_.devices.front().is_cuda() && num_params > 0 &&
        run_.params.front().device() == run_.devices.front()) {
      std::vector<variable_list> param_grads;
      for (const auto& grads : per_replica) {
        param_grads.emplace_back(grads.begin(), grads.begin() + num_params);
      }
      nccl_reduce_add(param_grads, run_.devices, result);
    }
    for (size_t j = 0; j < num_params; ++j) {
      if (result[j].defined()) continue;
      for (const auto& grads : per_replica) {
        if (grads[j].defined()) {
          auto g = grads[j].to(run_.params[j].device());
          result[j] = result[j].defined() ? result[j] + g : g;
        }
      }
    }
    for (size_t i = 0; i < run_.inputs.size(); ++i) {
      const size_t j = num_params + i;
      // Rows no replica received (the shortest split decides how many run) get zeros.
      at::Tensor total;
      int64_t offset = 0;
      for (size_t r = 0; r < per_replica.size(); ++r) {
        const auto length = leaf_length(r, j);
        if (per_replica[r][j].defined()) {
          if (!total.defined()) {
            total = torch::zeros_like(run_.inputs[i]);
          }
          total.narrow(run_.dim, offset, length).copy_(per_replica[r][j]);
        }
        offset += length;
      }
      result[j] = total;
    }
    return result;
  }

  int64_t leaf_length(size_t r, size_t j) const {
    return input_lengths_[r][j - run_.params.size()];
  }

  std::shared_ptr<ReplicaThreads> threads_;
  ReplicaRun run_;
  std::vector<Slot> slots_;
  std::vector<std::vector<int64_t>> input_lengths_;  // [replica][input]
  bool released_ = false;
};

}  // namespace

void attach_parallel_backward(const std::shared_ptr<ReplicaThreads>& threads, ReplicaRun run,
                              const c10::IValue& gathered) {
  std::vector<at::Tensor> targets;
  for_each_tensor(gathered, [&](const at::Tensor& t) { targets.push_back(t); });
  const auto n = run.outputs.size();
  for (const auto& outs : run.outputs) {
    TORCH_CHECK(outs.size() == targets.size(),
                "DataParallel: replicas returned different numbers of tensors");
  }
  std::vector<Slot> slots;
  for (size_t k = 0; k < targets.size(); ++k) {
    bool differentiable = false;
    bool scalar = run.dim == 0;
    Slot slot{k, false, {}};
    int64_t offset = 0;
    for (size_t r = 0; r < n; ++r) {
      const auto& out = run.outputs[r][k];
      differentiable = differentiable || out.requires_grad();
      scalar = scalar && out.dim() == 0;
      slot.offsets.push_back(offset);
      offset += out.dim() == 0 ? 1 : out.size(run.dim);
    }
    slot.scalar = scalar;
    if (differentiable) {
      slots.push_back(std::move(slot));
    }
  }
  if (slots.empty()) {
    return;
  }

  torch::autograd::edge_list edges;
  for (const auto* group : {&run.params, &run.inputs}) {
    for (const auto& t : *group) {
      edges.push_back(torch::autograd::impl::gradient_edge(t));
    }
  }
  auto node = compat::make_node<DataParallelBackward>(threads, std::move(run), std::move(edges));
  for (auto& slot : slots) {
    at::Tensor target = targets[slot.k];
    torch::autograd::create_gradient_edge(target, node);
    node->add_slot(std::move(slot));
  }
}

}  // namespace dpx::detail
