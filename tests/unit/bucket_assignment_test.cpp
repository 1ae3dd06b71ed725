// compute_bucket_assignment_by_size against PyTorch's reference layouts (spec/ddp.md).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dpx/ddp/bucket_assignment.h"

namespace dpx {
namespace {

using Layout = std::vector<std::vector<std::size_t>>;

std::vector<at::Tensor> of_sizes(const std::vector<std::int64_t>& numels,
                                 at::ScalarType dtype = at::kFloat) {
  std::vector<at::Tensor> out;
  for (auto n : numels) out.push_back(at::empty({n}, dtype));
  return out;
}

TEST(BucketAssignment, OneTensorPerBucketWhenEachFillsTheLimit) {
  auto r = compute_bucket_assignment_by_size(of_sizes({100, 200, 100, 50}), {400});
  EXPECT_EQ(r.buckets, (Layout{{0}, {1}, {2}, {3}}));
}

TEST(BucketAssignment, PerBucketLimitsAdvanceAndTheLastRepeats) {
  auto r = compute_bucket_assignment_by_size(of_sizes({10, 10, 10, 10}), {40, 80});
  EXPECT_EQ(r.buckets, (Layout{{0}, {1, 2}, {3}}));
  EXPECT_EQ(r.size_limits, (std::vector<std::size_t>{40, 80, 80}));
}

TEST(BucketAssignment, OneDtypePerBucketSortedBySmallestIndex) {
  std::vector<at::Tensor> t;
  for (int i = 0; i < 6; ++i) {
    t.push_back(i % 2 == 0 ? at::empty({50}, at::kFloat) : at::empty({25}, at::kDouble));
  }
  auto r = compute_bucket_assignment_by_size(t, {400});
  EXPECT_EQ(r.buckets, (Layout{{0, 2}, {1, 3}, {4}, {5}}));
}

TEST(BucketAssignment, ExplicitOrderIsKeptUnsorted) {
  auto r = compute_bucket_assignment_by_size(of_sizes({10, 10, 10, 10}), {80}, {}, {3, 2, 1, 0});
  EXPECT_EQ(r.buckets, (Layout{{3, 2}, {1, 0}}));
}

TEST(BucketAssignment, BadArgumentsAreRejected) {
  EXPECT_THROW(compute_bucket_assignment_by_size(of_sizes({1}), {}), c10::Error);
  EXPECT_THROW(compute_bucket_assignment_by_size(of_sizes({1, 2}), {4}, {}, {0}), c10::Error);
  EXPECT_THROW(compute_bucket_assignment_by_size(of_sizes({1, 2}), {4}, {}, {0, 5}), c10::Error);
  EXPECT_THROW(compute_bucket_assignment_by_size(of_sizes({1, 2}), {4}, {true}), c10::Error);
}

// PyTorch's layout for sparse gradients: each such tensor alone, without a size limit; the
// dense ones around it fill their buckets as if it were not there.
TEST(BucketAssignment, ExpectedSparseGradientsGetABucketEach) {
  auto r = compute_bucket_assignment_by_size(of_sizes({10, 10, 10, 10, 10}), {400},
                                             {false, true, false, true, false});
  EXPECT_EQ(r.buckets, (Layout{{0, 2, 4}, {1}, {3}}));
  EXPECT_EQ(r.size_limits, (std::vector<std::size_t>{400, kNoSizeLimit, kNoSizeLimit}));
  auto ordered = compute_bucket_assignment_by_size(of_sizes({10, 10, 10}), {80},
                                                   {true, false, false}, {2, 0, 1});
  EXPECT_EQ(ordered.buckets, (Layout{{0}, {2, 1}}));
}

TEST(BucketAssignment, SparseTensorsGetABucketEach) {
  std::vector<at::Tensor> t = of_sizes({10, 10});
  t.insert(t.begin() + 1, at::eye(4).to_sparse());
  auto r = compute_bucket_assignment_by_size(t, {400});
  EXPECT_EQ(r.buckets, (Layout{{0, 2}, {1}}));
}

}  // namespace
}  // namespace dpx
