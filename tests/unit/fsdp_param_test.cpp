// fully_shard's layout of one parameter, without communication: the shard of each rank is what
// torch.chunk gives (FSDP2's rule), the collectives' buffers hold the padded shards rank by
// rank, and the parameter keeps its identity while it changes shape.
#include <torch/torch.h>

#include "fsdp/fsdp_param.h"

namespace dpx::detail {
namespace {

// What the all-gather's output holds: each rank's padded shard, rank after rank, one column
// block [column, column + chunk_numel) per parameter.
torch::Tensor gathered_of(const std::vector<FsdpParam>& ranks, int64_t column, int64_t total) {
  const int world = static_cast<int>(ranks.size());
  auto out = torch::full({world, total}, -7.0, torch::kDouble);
  for (int r = 0; r < world; ++r) {
    out[r].narrow(0, column, ranks[r].chunk_numel()).copy_(ranks[r].padded_shard().reshape({-1}));
  }
  return out;
}

std::vector<FsdpParam> shard_on(const torch::Tensor& full, int world) {
  std::vector<FsdpParam> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back(full.clone().requires_grad_(), "w", r, world);
  }
  return ranks;
}

TEST(FsdpParam, ShardsAreTorchChunksPaddedToTheFirst) {
  for (int64_t rows : {0, 1, 5, 6, 13}) {
    for (int world : {1, 2, 3, 4}) {
      SCOPED_TRACE(std::to_string(rows) + " rows over " + std::to_string(world));
      auto full = torch::arange(rows * 3, torch::kDouble).reshape({rows, 3});
      auto ranks = shard_on(full, world);
      auto chunks = full.chunk(world, 0);
      for (int r = 0; r < world; ++r) {
        const auto& p = ranks[r];
        auto want = r < static_cast<int>(chunks.size()) ? chunks[r]
                                                        : torch::empty({0, 3}, torch::kDouble);
        EXPECT_TRUE(p.param().equal(want)) << "rank " << r;  // the parameter holds its shard
        EXPECT_EQ(p.chunk_rows(), chunks.empty() ? 0 : chunks[0].size(0));
        EXPECT_EQ(p.padded_shard().size(0), p.chunk_rows());
        EXPECT_EQ(p.padded_shard().narrow(0, p.local_rows(), p.chunk_rows() - p.local_rows())
                      .count_nonzero().item<int64_t>(), 0) << "padding is zeros";
      }
    }
  }
}

TEST(FsdpParam, CopyOutRebuildsTheWholeParameterInItsOwnTensor) {
  auto full = torch::randn({13, 4}, torch::kDouble);
  for (int world : {2, 3, 4}) {
    auto ranks = shard_on(full, world);
    const int64_t column = 5, total = 5 + ranks[0].chunk_numel() + 2;  // other parameters around
    auto gathered = gathered_of(ranks, column, total);
    for (auto& p : ranks) {
      auto* impl = p.param().unsafeGetTensorImpl();
      p.init_unsharded(torch::kDouble);
      p.copy_out(gathered, column);
      p.to_unsharded();
      EXPECT_EQ(p.param().unsafeGetTensorImpl(), impl);
      EXPECT_TRUE(p.param().equal(full));
      p.to_sharded();
      EXPECT_EQ(p.param().size(0), p.local_rows());
    }
  }
}

TEST(FsdpParam, CopyInLaysOutRankSlicesWithZeroPadding) {
  auto grad = torch::randn({5, 2}, torch::kDouble);
  const int world = 4;  // chunks of 2 rows: 2, 2, 1, 0
  FsdpParam p(torch::zeros({5, 2}, torch::kDouble), "w", 0, world);
  auto input = torch::full({world, 1 + p.chunk_numel()}, -1.0, torch::kDouble);
  p.copy_in(grad, input, 1);
  auto flat = grad.reshape({-1});
  EXPECT_TRUE(input[0].narrow(0, 1, 4).equal(flat.narrow(0, 0, 4)));
  EXPECT_TRUE(input[1].narrow(0, 1, 4).equal(flat.narrow(0, 4, 4)));
  EXPECT_TRUE(input[2].narrow(0, 1, 2).equal(flat.narrow(0, 8, 2)));
  EXPECT_TRUE(input[2].narrow(0, 3, 2).equal(torch::zeros({2}, torch::kDouble)));
  EXPECT_TRUE(input[3].narrow(0, 1, 4).equal(torch::zeros({4}, torch::kDouble)));
  EXPECT_TRUE(input.select(1, 0).equal(torch::full({world}, -1.0, torch::kDouble)))
      << "columns of other parameters are left alone";
}

TEST(FsdpParam, UnshardedStorageIsFreedWhenResharded) {
  FsdpParam p(torch::randn({64, 64}).requires_grad_(), "w", 1, 2);
  p.init_unsharded(torch::kFloat);
  auto gathered = torch::zeros({2, p.chunk_numel()});
  p.copy_out(gathered, 0);
  p.to_unsharded();
  auto saved = p.param().t();  // as autograd saves weight.t() for a matrix product
  EXPECT_EQ(saved.storage().nbytes(), 64 * 64 * sizeof(float));
  p.to_sharded();
  EXPECT_EQ(saved.storage().nbytes(), 0u) << "the view keeps the storage, not its bytes";
  p.copy_out(gathered.fill_(3), 0);
  p.to_unsharded();
  EXPECT_TRUE(saved.equal(torch::full({64, 64}, 3.0f))) << "refilled under the same storage";
}

TEST(FsdpParam, ScalarParametersAreRefused) {
  try {
    FsdpParam p(torch::ones({}), "temperature", 0, 2);
    FAIL() << "a 0-dim parameter was sharded";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter temperature is a scalar"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dpx::detail
