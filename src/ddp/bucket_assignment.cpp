#include "dpx/ddp/bucket_assignment.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <tuple>

namespace dpx {
namespace {

struct OpenBucket {
  std::vector<std::size_t> indices;
  std::size_t bytes = 0;
  std::size_t limit_index = 0;  // position in the list of limits this dtype/device is at
};

using BucketKey = std::tuple<int, int, int>;  // dtype, device type, device index

BucketKey key_of(const at::Tensor& t) {
  return {static_cast<int>(t.scalar_type()), static_cast<int>(t.device().type()),
          static_cast<int>(t.device().index())};
}

// The buckets in the order of their lowest tensor index (ties keep their order).
BucketAssignment sorted_by_lowest_index(BucketAssignment result) {
  std::vector<std::size_t> order(result.buckets.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto min_of = [&](std::size_t b) {
    return *std::min_element(result.buckets[b].begin(), result.buckets[b].end());
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return min_of(a) < min_of(b); });
  BucketAssignment sorted;
  for (auto b : order) {
    sorted.buckets.push_back(std::move(result.buckets[b]));
    sorted.size_limits.push_back(result.size_limits[b]);
  }
  return sorted;
}

}  // namespace

BucketAssignment compute_bucket_assignment_by_size(
    const std::vector<at::Tensor>& tensors, const std::vector<std::size_t>& bucket_size_limits,
    const std::vector<bool>& expect_sparse_gradient,
    const std::vector<std::int64_t>& tensor_indices) {
  TORCH_CHECK(!bucket_size_limits.empty(), "compute_bucket_assignment_by_size: "
              "bucket_size_limits must hold at least one limit");
  TORCH_CHECK(tensor_indices.empty() || tensor_indices.size() == tensors.size(),
              "compute_bucket_assignment_by_size: got ", tensor_indices.size(),
              " tensor indices for ", tensors.size(), " tensors");
  TORCH_CHECK(expect_sparse_gradient.empty() || expect_sparse_gradient.size() == tensors.size(),
              "compute_bucket_assignment_by_size: got ", expect_sparse_gradient.size(),
              " expect_sparse_gradient flags for ", tensors.size(), " tensors");
  BucketAssignment result;
  std::map<BucketKey, OpenBucket> open;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::size_t index = tensor_indices.empty() ? i : tensor_indices[i];
    TORCH_CHECK(index < tensors.size(), "compute_bucket_assignment_by_size: tensor index ",
                index, " is out of range for ", tensors.size(), " tensors");
    const auto& t = tensors[index];
    if (t.is_sparse() || (!expect_sparse_gradient.empty() && expect_sparse_gradient[index])) {
      result.buckets.push_back({index});  // sparse tensors are reduced one by one
      result.size_limits.push_back(kNoSizeLimit);
      continue;
    }
    auto& bucket = open[key_of(t)];
    bucket.indices.push_back(index);
    bucket.bytes += t.numel() * t.element_size();
    const std::size_t limit = bucket_size_limits[bucket.limit_index];
    if (bucket.bytes >= limit) {
      result.buckets.push_back(std::move(bucket.indices));
      result.size_limits.push_back(limit);
      bucket.indices.clear();
      bucket.bytes = 0;
      bucket.limit_index = std::min(bucket.limit_index + 1, bucket_size_limits.size() - 1);
    }
  }
  for (auto& [key, bucket] : open) {
    if (!bucket.indices.empty()) {
      result.buckets.push_back(std::move(bucket.indices));
      result.size_limits.push_back(bucket_size_limits[bucket.limit_index]);
    }
  }
  // Registration order approximates the reverse of the gradient order; sorting keeps buckets
  // that fill together next to each other.
  if (tensor_indices.empty()) return sorted_by_lowest_index(std::move(result));
  return result;
}

}  // namespace dpx
