#include "support/fsdp_parity.h"

#include <gtest/gtest.h>

#include "dpx/fsdp/fsdp_state_dict.h"

namespace dpx::test {
namespace {

constexpr int kSteps = 20;
constexpr int64_t kPerRank = 3;

}  // namespace

FsdpParityData make_fsdp_parity_data(int world, bool tied) {
  const int64_t out_features = tied ? 6 : 4;
  torch::manual_seed(3);
  FsdpParityData d;
  for (int s = 0; s < kSteps; ++s) {
    d.x.push_back(torch::randn({world * kPerRank, 6}, torch::kDouble));
    d.y.push_back(torch::randn({world * kPerRank, out_features}, torch::kDouble));
  }
  return d;
}

NamedTensors train_one_process(bool tied, const FsdpParityData& data, const MakeOptimizer& make) {
  auto net = make_shard_net(tied);
  auto opt = make(unique_parameters(*net));
  for (int s = 0; s < kSteps; ++s) {
    opt->zero_grad();
    torch::mse_loss(net->forward(data.x[s]), data.y[s]).backward();
    opt->step();
  }
  return named_state(*net);
}

std::uint64_t train_sharded_and_compare(const std::shared_ptr<ProcessGroup>& pg, bool tied,
                                        const FsdpParityData& data, const MakeOptimizer& make,
                                        const NamedTensors& want, const FullyShardOptions& options,
                                        const FsdpSetup& setup) {
  const int rank = pg->rank();
  auto net = make_shard_net(tied);
  auto model = shard(net, pg, options);
  if (setup) setup(model);
  auto opt = make(unique_parameters(*net));
  const auto before = pg->collectives_issued();
  for (int s = 0; s < kSteps; ++s) {
    opt->zero_grad();
    auto x = data.x[s].narrow(0, rank * kPerRank, kPerRank);
    auto y = data.y[s].narrow(0, rank * kPerRank, kPerRank);
    torch::mse_loss(model(x), y).backward();
    opt->step();
  }
  const auto issued = pg->collectives_issued() - before;
  if (setup) {  // what setup left unsharded goes back to its shards for the state dict
    model.fsdp().reshard();
    for (auto& b : net->blocks) b.fsdp().reshard();
  }
  const auto got = full_state_dict(*net, {.rank0_only = false});
  EXPECT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    if (got[i].second.sizes() != want[i].second.sizes()) {
      ADD_FAILURE() << got[i].first << ": shape " << got[i].second.sizes() << ", want "
                    << want[i].second.sizes();
      continue;
    }
    EXPECT_TRUE(torch::allclose(got[i].second, want[i].second, 0, 1e-12))
        << got[i].first << " differs by "
        << (got[i].second - want[i].second).abs().max().item<double>();
  }
  return issued;
}

}  // namespace dpx::test
