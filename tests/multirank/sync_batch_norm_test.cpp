// SyncBatchNorm against plain BatchNorm over every rank's samples in one process.
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "dpx/algorithms/sync_batch_norm.h"
#include "support/expect_throws.h"
#include "support/harness.h"
#include "support/sync_batch_norm_parity.h"

namespace dpx::sync_batch_norm_test {
namespace {

constexpr int64_t kChannels = 4;

struct Case {
  std::string backend;
  test::SbnCase sbn;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.backend << ", " << c.sbn.batch.size() << " ranks";
}

class SyncBatchNormParity : public ::testing::TestWithParam<Case> {};

// Outputs, input gradients, summed weight and bias gradients and running statistics equal plain
// BatchNorm2d's on the concatenated batch, whatever each rank holds
// (support/sync_batch_norm_parity.h).
TEST_P(SyncBatchNormParity, MatchesBatchNormOnTheWholeBatch) {
  const auto& c = GetParam();
  const int world = static_cast<int>(c.sbn.batch.size());
  const auto data = test::sbn_data(c.sbn);
  std::vector<test::SbnResult> got(world);
  auto store = Store::hash();
  auto errors = test::run_threads(world, [&](int rank) {
    auto pg = new_process_group(c.backend, Store::prefix("sbn", store), rank, world);
    got[rank] = test::sync_batch_norm_on_rank(pg, c.sbn, data);
  });
  for (int r = 0; r < world; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
  const auto want = test::batch_norm_on_the_whole_batch(c.sbn, data);
  auto weight_grad = torch::zeros_like(want.grad_weight), bias_grad = weight_grad.clone();
  for (int r = 0; r < world; ++r) {
    test::expect_rank_matches(got[r], want, c.sbn, r);
    weight_grad += test::grad_or_zeros(got[r].grad_weight);
    bias_grad += test::grad_or_zeros(got[r].grad_bias);
  }
  test::expect_affine_grads_match(weight_grad, bias_grad, want);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& backend : test::backends()) {
    out.push_back({backend, {{4, 4}, 0.1}});
    out.push_back({backend, {{2, 5, 3}, 0.3}});        // uneven batches
    out.push_back({backend, {{3, 0, 4}, std::nullopt}});  // an empty rank; cumulative average
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, SyncBatchNormParity, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           std::string name = info.param.backend + "_";
                           for (auto b : info.param.sbn.batch) name += std::to_string(b);
                           return name + (info.param.sbn.momentum ? "" : "_cumulative");
                         });

TEST(SyncBatchNorm, DifferentChannelCountsFailOnEveryRank) {
  auto store = Store::hash();
  auto errors = test::run_threads(2, [&](int rank) {
    auto pg = new_process_group("shm", Store::prefix("sbn", store), rank, 2);
    const int64_t channels = rank == 0 ? 3 : 5;
    SyncBatchNorm sbn(SyncBatchNormOptions(channels), pg);
    sbn(torch::randn({4, channels}));
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(errors[r], ::testing::HasSubstr("different numbers of channels (rank 0: 3, "
                                                "rank 1: 5)"))
        << "rank " << r;
  }
}

TEST(SyncBatchNorm, WithoutAGroupOrInEvaluationIsBatchNorm) {
  torch::manual_seed(1);
  auto x = torch::randn({6, kChannels, 5});
  SyncBatchNorm sbn(kChannels);
  torch::nn::BatchNorm1d bn(kChannels);
  EXPECT_TRUE(torch::equal(sbn(x), bn(x)));
  EXPECT_TRUE(torch::equal(sbn->running_var, bn->running_var));
  auto pg = new_process_group("gloo", Store::hash(), 0, 1);
  sbn->set_process_group(pg);
  sbn->eval();
  bn->eval();
  EXPECT_TRUE(torch::equal(sbn(x), bn(x)));
  EXPECT_THAT(test::expect_throws<c10::Error>([&] { sbn(torch::randn({6})); }),
              ::testing::HasSubstr("expected at least 2D input (got 1D input)"));
  EXPECT_THAT(test::expect_throws<c10::Error>([&] { sbn(torch::randn({6, 3})); }),
              ::testing::HasSubstr("the input has 3 channels"));
}

struct Block : torch::nn::Module {
  Block() { bn = register_module("bn", torch::nn::BatchNorm2d(kChannels)); }
  torch::Tensor forward(const torch::Tensor& x) { return bn(x); }
  torch::nn::BatchNorm2d bn{nullptr};
};

// A Sequential that nests (torch::nn::Sequential's templated forward cannot be held by another).
struct Stage : torch::nn::SequentialImpl {
  using SequentialImpl::SequentialImpl;
  torch::Tensor forward(torch::Tensor x) { return SequentialImpl::forward(x); }
};

TEST(ConvertSyncBatchNorm, ReplacesBatchNormsInSequentialsKeepingTheirTensors) {
  auto pg = new_process_group("gloo", Store::hash(), 0, 1);
  auto inner = std::make_shared<Stage>(torch::nn::Linear(kChannels, kChannels),
                                       torch::nn::BatchNorm1d(kChannels));
  torch::nn::Sequential net(torch::nn::Conv2d(1, kChannels, 3), torch::nn::BatchNorm2d(kChannels),
                            torch::nn::Flatten(), inner, SyncBatchNorm(kChannels));
  net->eval();
  const auto bn_weight = net[1]->as<torch::nn::BatchNorm2d>()->weight;
  const auto bn_mean = net[1]->as<torch::nn::BatchNorm2d>()->running_mean;
  auto converted = convert_sync_batchnorm(net.ptr(), pg);
  EXPECT_EQ(converted.get(), net.ptr().get());  // changed in place
  auto* sbn = net[1]->as<SyncBatchNormImpl>();
  ASSERT_NE(sbn, nullptr);
  EXPECT_TRUE(sbn->weight.is_same(bn_weight));
  EXPECT_TRUE(sbn->running_mean.is_same(bn_mean));
  EXPECT_EQ(sbn->process_group(), pg);
  EXPECT_FALSE(sbn->is_training());
  ASSERT_NE((*inner)[1]->as<SyncBatchNormImpl>(), nullptr);
  EXPECT_EQ(net[4]->as<SyncBatchNormImpl>()->process_group(), pg);
  // The Sequential's forward now runs the replacements (a 3x3 input: one value per channel).
  net->train();
  EXPECT_EQ(net->forward(torch::randn({2, 1, 3, 3})).sizes(), (std::vector<int64_t>{2, kChannels}));
  EXPECT_EQ(sbn->num_batches_tracked.item<int64_t>(), 1);

  auto root = convert_sync_batchnorm(torch::nn::BatchNorm3d(kChannels).ptr(), pg);
  EXPECT_NE(std::dynamic_pointer_cast<SyncBatchNormImpl>(root), nullptr);
}

TEST(ConvertSyncBatchNorm, ABatchNormOutsideASequentialIsNamedAndNothingChanges) {
  auto pg = new_process_group("gloo", Store::hash(), 0, 1);
  torch::nn::Sequential net(torch::nn::BatchNorm1d(kChannels), std::make_shared<Block>());
  const auto error =
      test::expect_throws<c10::Error>([&] { convert_sync_batchnorm(net.ptr(), pg); });
  EXPECT_THAT(error, ::testing::HasSubstr("'1.bn' (torch::nn::BatchNorm2dImpl) is held by a "));
  EXPECT_THAT(error, ::testing::HasSubstr("Block, whose forward() calls it"));
  EXPECT_NE(net[0]->as<torch::nn::BatchNorm1d>(), nullptr);
}

}  // namespace
}  // namespace dpx::sync_batch_norm_test
