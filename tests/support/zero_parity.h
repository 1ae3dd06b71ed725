// The ZeroRedundancyOptimizer parity check, shared by threads as ranks
// (tests/multirank/zero_redundancy_optimizer_test.cpp) and processes under mpirun
// (tests/mpi/mpi_parity_test.cpp): after five steps with an LR change, every rank's parameters
// equal the unsharded optimizer's bit for bit, and each rank keeps state for its shard only.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "dpx/algorithms/zero_redundancy_optimizer.h"
#include "dpx/comm/process_group.h"

namespace dpx::test {

inline torch::nn::Sequential zero_net() {
  torch::manual_seed(11);
  return torch::nn::Sequential(torch::nn::Linear(10, 16), torch::nn::ReLU(),
                               torch::nn::Linear(16, 8), torch::nn::Linear(8, 3));
}

inline std::vector<torch::Tensor> copy_params(const torch::nn::Sequential& net) {
  std::vector<torch::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

// Gradients as DDP leaves them: the same on every rank, different at every step.
inline void set_grads(const std::vector<torch::Tensor>& params, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = torch::sin(params[i].detach() * (step + 1) + static_cast<double>(i));
  }
}

// Two groups (the second at a tenth of the learning rate), as a user with weight-decay-free
// biases would build them.
inline std::vector<torch::optim::OptimizerParamGroup> two_groups(
    const std::vector<torch::Tensor>& params, const OptimizerFactory& make) {
  std::vector<torch::Tensor> weights, biases;
  for (const auto& p : params) (p.dim() == 2 ? weights : biases).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(weights);
  groups.emplace_back(biases);
  auto probe = make(groups);  // fills in each group's options
  auto out = probe->param_groups();
  out[1].options().set_lr(out[1].options().get_lr() / 10);
  return out;
}

struct ZeroCase {
  std::string name;
  std::function<OptimizerFactory()> factory;
};

inline void PrintTo(const ZeroCase& c, std::ostream* os) { *os << c.name; }

inline std::vector<ZeroCase> zero_optimizers() {
  using namespace torch::optim;
  return {{"sgd_momentum", [] { return optimizer_factory<SGD>(SGDOptions(0.1).momentum(0.9)); }},
          {"adam", [] { return optimizer_factory<Adam>(AdamOptions(1e-2)); }},
          {"adamw", [] { return optimizer_factory<AdamW>(AdamWOptions(1e-2).weight_decay(0.1)); }}};
}

// Five steps, the first group's LR halved after the second.
inline void zero_steps(torch::optim::Optimizer& opt, const std::vector<torch::Tensor>& params) {
  for (int s = 0; s < 5; ++s) {
    auto& first = opt.param_groups()[0].options();
    if (s == 2) first.set_lr(first.get_lr() / 2);
    set_grads(params, s);
    opt.step();
  }
}

// The unsharded optimizer's parameters after zero_steps.
inline std::vector<torch::Tensor> zero_reference(const ZeroCase& c,
                                                 const torch::nn::Sequential& net) {
  auto params = copy_params(net);
  auto ref = c.factory()(two_groups(params, c.factory()));
  zero_steps(*ref, params);
  return params;
}

// One rank's part (pg->rank()): ZeroRedundancyOptimizer over `pg` reaches `want` exactly.
inline void expect_zero_matches(const std::shared_ptr<ProcessGroup>& pg, const ZeroCase& c,
                                const torch::nn::Sequential& net,
                                const std::vector<torch::Tensor>& want) {
  const int rank = pg->rank();
  auto params = copy_params(net);
  ZeroRedundancyOptimizer zero(two_groups(params, c.factory()), pg, c.factory());
  zero_steps(zero, params);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(params[i], want[i])) << "rank " << rank << " param " << i;
  }
  EXPECT_EQ(zero.local_optimizer().state().size(), zero.shard(rank).size());
  size_t owned = 0;
  for (int r = 0; r < pg->size(); ++r) owned += zero.shard(r).size();
  EXPECT_EQ(owned, params.size());
}

}  // namespace dpx::test
