// ZeroRedundancyOptimizer against the unsharded optimizer: the same parameters, bit for bit.
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "dpx/algorithms/zero_redundancy_optimizer.h"
#include "support/expect_throws.h"
#include "support/harness.h"
#include "algorithms/zero_partition.h"

namespace dpx::zero_redundancy_optimizer_test {
namespace {

using torch::optim::OptimizerParamGroup;

torch::nn::Sequential make_net() {
  torch::manual_seed(11);
  return torch::nn::Sequential(torch::nn::Linear(10, 16), torch::nn::ReLU(),
                               torch::nn::Linear(16, 8), torch::nn::Linear(8, 3));
}

std::vector<torch::Tensor> copy_params(const torch::nn::Sequential& net) {
  std::vector<torch::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

// Gradients as DDP leaves them: the same on every rank, different at every step.
void set_grads(const std::vector<torch::Tensor>& params, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = torch::sin(params[i].detach() * (step + 1) + static_cast<double>(i));
  }
}

// Two groups (the second at a tenth of the learning rate), as a user with weight-decay-free
// biases would build them.
std::vector<OptimizerParamGroup> two_groups(const std::vector<torch::Tensor>& params,
                                            const OptimizerFactory& make) {
  std::vector<torch::Tensor> weights, biases;
  for (const auto& p : params) (p.dim() == 2 ? weights : biases).push_back(p);
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(weights);
  groups.emplace_back(biases);
  auto probe = make(groups);  // fills in each group's options
  auto out = probe->param_groups();
  out[1].options().set_lr(out[1].options().get_lr() / 10);
  return out;
}

struct Case {
  std::string name;
  std::function<OptimizerFactory()> factory;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> optimizers() {
  using namespace torch::optim;
  return {{"sgd_momentum", [] { return optimizer_factory<SGD>(SGDOptions(0.1).momentum(0.9)); }},
          {"adam", [] { return optimizer_factory<Adam>(AdamOptions(1e-2)); }},
          {"adamw", [] { return optimizer_factory<AdamW>(AdamWOptions(1e-2).weight_decay(0.1)); }}};
}

class ZeroParity : public ::testing::TestWithParam<std::tuple<Case, std::string, int>> {};

// Five steps with an LR change after the second: every rank's parameters equal the unsharded
// optimizer's exactly, and each rank keeps state for its shard only.
TEST_P(ZeroParity, SameParametersAsTheUnshardedOptimizer) {
  const auto& [c, backend, world] = GetParam();
  const auto net = make_net();
  constexpr int kSteps = 5;
  auto step_all = [&](torch::optim::Optimizer& opt, const std::vector<torch::Tensor>& params) {
    for (int s = 0; s < kSteps; ++s) {
      if (s == 2) opt.param_groups()[0].options().set_lr(opt.param_groups()[0].options().get_lr() / 2);
      set_grads(params, s);
      opt.step();
    }
  };
  auto ref_params = copy_params(net);
  auto ref = c.factory()(two_groups(ref_params, c.factory()));
  step_all(*ref, ref_params);

  auto store = Store::hash();
  auto errors = test::run_threads(world, [&](int rank) {
    auto pg = new_process_group(backend, Store::prefix("zero", store), rank, world);
    auto params = copy_params(net);
    ZeroRedundancyOptimizer zero(two_groups(params, c.factory()), pg, c.factory());
    step_all(zero, params);
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i], ref_params[i])) << "rank " << rank << " param " << i;
    }
    EXPECT_EQ(zero.local_optimizer().state().size(), zero.shard(rank).size());
    size_t owned = 0;
    for (int r = 0; r < world; ++r) owned += zero.shard(r).size();
    EXPECT_EQ(owned, params.size());
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(
    OptimizersBackendsWorlds, ZeroParity,
    ::testing::Combine(::testing::ValuesIn(optimizers()), ::testing::ValuesIn(test::backends()),
                       ::testing::Values(2, 3)),
    [](const auto& info) {
      return std::get<0>(info.param).name + "_" + std::get<1>(info.param) + "_" +
             std::to_string(std::get<2>(info.param));
    });

// Consolidated on rank 0 of 2 ranks after 2 steps, saved, loaded by 3 ranks which take 2 more:
// the parameters of 4 unsharded steps.
TEST(Zero, StateSavedAtOneWorldSizeLoadsAtAnother) {
  const auto net = make_net();
  const auto make = optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions(1e-2));
  auto ref_params = copy_params(net);
  torch::optim::Adam ref(ref_params, torch::optim::AdamOptions(1e-2));
  for (int s = 0; s < 4; ++s) {
    set_grads(ref_params, s);
    ref.step();
  }

  auto params_after_2 = copy_params(net);
  std::string saved;
  auto store = Store::hash();
  auto errors = test::run_threads(2, [&](int rank) {
    auto pg = new_process_group("shm", Store::prefix("zero2", store), rank, 2);
    auto params = rank == 0 ? params_after_2 : copy_params(net);
    ZeroRedundancyOptimizer zero(params, pg, make);
    for (int s = 0; s < 2; ++s) {
      set_grads(params, s);
      zero.step();
    }
    if (rank == 1) {
      auto error = test::expect_throws<c10::Error>([&] {
        std::ostringstream out;
        torch::save(zero, out);
      });
      EXPECT_THAT(error, ::testing::HasSubstr("call consolidate_state_dict(to) on every rank"));
    }
    zero.consolidate_state_dict(0);
    if (rank == 0) {
      std::ostringstream out;
      torch::save(zero, out);
      saved = out.str();
    }
  });
  for (int r = 0; r < 2; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;

  errors = test::run_threads(3, [&](int rank) {
    auto pg = new_process_group("gloo", Store::prefix("zero3", store), rank, 3);
    std::vector<torch::Tensor> params;
    for (const auto& p : params_after_2) params.push_back(p.detach().clone().requires_grad_(true));
    ZeroRedundancyOptimizer zero(params, pg, make);
    std::istringstream in(saved);
    torch::load(zero, in);
    for (int s = 2; s < 4; ++s) {
      set_grads(params, s);
      zero.step();
    }
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i], ref_params[i])) << "rank " << rank << " param " << i;
    }
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(Zero, ANonZeroArchiveIsRefused) {
  auto pg = new_process_group("gloo", Store::hash(), 0, 1);
  auto params = copy_params(make_net());
  torch::optim::SGD plain(params, 0.1);
  std::ostringstream out;
  torch::save(plain, out);
  ZeroRedundancyOptimizer zero(params, pg,
                               optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(0.1)));
  std::istringstream in(out.str());
  EXPECT_THAT(test::expect_throws<c10::Error>([&] { torch::load(zero, in); }),
              ::testing::HasSubstr("was not saved by a ZeroRedundancyOptimizer"));
}

// Largest first, to the emptiest rank (the first on ties), counted across groups.
TEST(ZeroPartition, GreedyLargestFirstAcrossGroups) {
  const auto p = detail::zero_partition({{3, 10, 5, 10}, {4, 4}}, 2);
  using V = std::vector<size_t>;
  // Group 0 in size order: 10 (k=1) -> 0, 10 (k=3) -> 1, 5 -> 0, 3 -> 1: sizes 15 and 13.
  EXPECT_EQ(p[0][0], (V{1, 2}));
  EXPECT_EQ(p[0][1], (V{3, 0}));
  // Group 1 goes on from those sizes: 4 -> 1 (17), 4 -> 0 (19).
  EXPECT_EQ(p[1][0], (V{1}));
  EXPECT_EQ(p[1][1], (V{0}));
}

}  // namespace
}  // namespace dpx::zero_redundancy_optimizer_test
