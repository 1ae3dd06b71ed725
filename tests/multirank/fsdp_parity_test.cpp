// fully_shard trains as one process on the whole batch does: float64, units whose rows do not
// divide by the world size, a frozen parameter, the root's own parameters, a buffer, a tied
// parameter; world sizes 2, 3 and 4 (threads as ranks).
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/fsdp/fully_shard.h"
#include "support/fsdp_models.h"
#include "support/harness.h"

namespace dpx {
namespace {

constexpr int kSteps = 20;
constexpr int64_t kPerRank = 3;

struct Data {
  std::vector<torch::Tensor> x, y;  // per step, the whole batch
};

Data make_data(int world, int64_t out_features) {
  torch::manual_seed(3);
  Data d;
  for (int s = 0; s < kSteps; ++s) {
    d.x.push_back(torch::randn({world * kPerRank, 6}, torch::kDouble));
    d.y.push_back(torch::randn({world * kPerRank, out_features}, torch::kDouble));
  }
  return d;
}

using MakeOptimizer =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;


std::vector<std::pair<std::string, torch::Tensor>> train_one_process(bool tied, int world,
                                                                     const Data& data,
                                                                     const MakeOptimizer& make) {
  auto net = test::make_shard_net(tied);
  auto opt = make(test::unique_parameters(*net));
  for (int s = 0; s < kSteps; ++s) {
    opt->zero_grad();
    torch::mse_loss(net->forward(data.x[s]), data.y[s]).backward();
    opt->step();
  }
  return test::named_state(*net);
}

using Setup = std::function<void(FSDPModule<test::ShardNetImpl>&)>;

// Returns the collectives rank 0 issued in training.
std::uint64_t expect_parity(const std::string& backend, int world, bool tied,
                            const MakeOptimizer& make, const FullyShardOptions& options = {},
                            const Setup& setup = nullptr) {
  SCOPED_TRACE(backend + ", world " + std::to_string(world) + (tied ? ", tied" : ""));
  const auto data = make_data(world, tied ? 6 : 4);
  const auto want = train_one_process(tied, world, data, make);
  auto store = Store::hash();
  std::atomic<std::uint64_t> issued{0};
  auto errors = test::run_threads(world, [&](int rank) {
    auto pg = new_process_group(backend, store, rank, world);
    auto net = test::make_shard_net(tied);
    auto model = test::shard(net, pg, options);
    if (setup) setup(model);
    auto opt = make(test::unique_parameters(*net));
    const auto before = pg->collectives_issued();
    for (int s = 0; s < kSteps; ++s) {
      opt->zero_grad();
      auto x = data.x[s].narrow(0, rank * kPerRank, kPerRank);
      auto y = data.y[s].narrow(0, rank * kPerRank, kPerRank);
      torch::mse_loss(model(x), y).backward();
      opt->step();
    }
    if (rank == 0) issued = pg->collectives_issued() - before;
    if (setup) {  // what setup left unsharded goes back to its shards for the state dict
      model.fsdp().reshard();
      for (auto& b : net->blocks) b.fsdp().reshard();
    }
    const auto got = full_state_dict(*net, {.rank0_only = false});
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first);
      ASSERT_EQ(got[i].second.sizes(), want[i].second.sizes()) << got[i].first;
      EXPECT_TRUE(torch::allclose(got[i].second, want[i].second, 0, 1e-12))
          << got[i].first << " differs by "
          << (got[i].second - want[i].second).abs().max().item<double>();
    }
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return issued;
}

TEST(FsdpParity, SgdMatchesOneProcessOnTheWholeBatch) {
  for (const std::string backend : {"shm", "gloo"}) {
    for (int world : {2, 3, 4}) expect_parity(backend, world, /*tied=*/false, test::sgd);
  }
}

TEST(FsdpParity, AdamWWithATiedParameter) {
  for (int world : {2, 3}) expect_parity("shm", world, /*tied=*/true, test::adamw);
}

// The schedule options change when parameters are gathered, never the result; the collectives
// counted on rank 0 show each option took effect.
TEST(FsdpParity, ScheduleOptionsKeepTheResult) {
  constexpr int kWorld = 3;
  const auto baseline = expect_parity("shm", kWorld, false, test::sgd);
  FullyShardOptions keep;
  keep.reshard_after_forward = false;
  const auto kept = expect_parity("shm", kWorld, false, test::sgd, keep);
  EXPECT_LT(kept, baseline) << "reshard_after_forward=false: backward all-gathers nothing";
  EXPECT_EQ(expect_parity("shm", kWorld, false, test::sgd, {}, [](auto& model) {
              model.fsdp().set_reshard_after_forward(false);  // every unit: recurse is true
            }), kept) << "set_reshard_after_forward(false) after wrapping acts as the option";
  FullyShardOptions no_prefetch;
  no_prefetch.forward_prefetch = no_prefetch.backward_prefetch = false;
  EXPECT_EQ(expect_parity("shm", kWorld, false, test::sgd, no_prefetch), baseline);
  EXPECT_EQ(expect_parity("shm", kWorld, false, test::sgd, {}, [](auto& model) {
              model.fsdp().unshard();  // before training: the first forward gathers nothing
              model.fsdp().reshard();
            }), baseline);
}

}  // namespace
}  // namespace dpx
