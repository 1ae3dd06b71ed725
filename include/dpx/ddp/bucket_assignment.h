// Which gradients share a bucket (one all-reduce each). A pure function, so the layouts can be
// checked against PyTorch's reference layouts without any communication.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "dpx/ddp/ddp_options.h"  // kDefaultFirstBucketBytes

namespace dpx {

struct BucketAssignment {
  std::vector<std::vector<std::size_t>> buckets;  // tensor indices per bucket
  std::vector<std::size_t> size_limits;           // the byte cap each bucket was filled against
};

// The size limit of a bucket that holds one sparse gradient (it has no cap).
constexpr std::size_t kNoSizeLimit = std::numeric_limits<std::size_t>::max();

// Groups `tensors` into buckets of one dtype and device each. Tensors are taken in the order of
// `tensor_indices` (or 0..n-1 when empty); a bucket closes once it holds at least the current
// limit in bytes, and each dtype/device walks through `bucket_size_limits` (the last limit
// repeats). A sparse tensor, or one whose `expect_sparse_gradient` flag is set (empty: none),
// gets a bucket of its own with limit kNoSizeLimit, as in PyTorch. Without `tensor_indices` the
// buckets are sorted by their smallest tensor index; with it, they stay in the order they
// filled (that order is the observed gradient order).
BucketAssignment compute_bucket_assignment_by_size(
    const std::vector<at::Tensor>& tensors, const std::vector<std::size_t>& bucket_size_limits,
    const std::vector<bool>& expect_sparse_gradient = {},
    const std::vector<std::int64_t>& tensor_indices = {});

}  // namespace dpx
