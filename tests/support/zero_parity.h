// The ZeroRedundancyOptimizer checks, shared by threads as ranks
// (tests/multirank/zero_redundancy_optimizer_test.cpp) and processes under mpirun
// (tests/mpi/mpi_parity_test.cpp, mpi_resume_test.cpp): after five steps with an LR change, every
// rank's parameters equal the unsharded optimizer's bit for bit, and each rank keeps state for
// its shard only; and a state saved at one world size resumes at another.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <ostream>
#include <sstream>
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

// ZeRO's state saved at one world size and loaded at another: Adam, 2 steps on the saving ranks,
// 2 more on the loading ones, which end with the parameters of 4 unsharded steps.
inline OptimizerFactory zero_resume_factory() {
  return optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions(1e-2));
}

inline std::vector<torch::Tensor> zero_resume_reference(const torch::nn::Sequential& net) {
  auto params = copy_params(net);
  torch::optim::Adam ref(params, torch::optim::AdamOptions(1e-2));
  for (int s = 0; s < 4; ++s) {
    set_grads(params, s);
    ref.step();
  }
  return params;
}

struct ZeroSaved {
  std::string optimizer;               // torch::save's archive, consolidated
  std::vector<torch::Tensor> params;  // after the saving ranks' steps
};

// The saving rank's part: 2 steps; a save before consolidate_state_dict is refused on the ranks
// other than 0; consolidated on rank 0, which returns its archive and parameters (the others
// return nothing).
inline ZeroSaved zero_save_after_two_steps(const std::shared_ptr<ProcessGroup>& pg,
                                           const torch::nn::Sequential& net) {
  auto params = copy_params(net);
  ZeroRedundancyOptimizer zero(params, pg, zero_resume_factory());
  for (int s = 0; s < 2; ++s) {
    set_grads(params, s);
    zero.step();
  }
  if (pg->rank() != 0) {
    std::string error;
    try {
      std::ostringstream out;
      torch::save(zero, out);
    } catch (const c10::Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("call consolidate_state_dict(to) on every rank"), std::string::npos)
        << "a save before consolidation: '" << error << "'";
  }
  zero.consolidate_state_dict(0);
  if (pg->rank() != 0) return {};
  std::ostringstream out;
  torch::save(zero, out);
  return {out.str(), params};
}

// The loading rank's part, at any world size: `saved` loaded, steps 2 and 3 reach `want` exactly.
inline void expect_zero_resumes(const std::shared_ptr<ProcessGroup>& pg, const ZeroSaved& saved,
                                const std::vector<torch::Tensor>& want) {
  std::vector<torch::Tensor> params;
  for (const auto& p : saved.params) params.push_back(p.detach().clone().requires_grad_(true));
  ZeroRedundancyOptimizer zero(params, pg, zero_resume_factory());
  std::istringstream in(saved.optimizer);
  torch::load(zero, in);
  for (int s = 2; s < 4; ++s) {
    set_grads(params, s);
    zero.step();
  }
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(params[i], want[i])) << "rank " << pg->rank() << " param " << i;
  }
}

}  // namespace dpx::test
