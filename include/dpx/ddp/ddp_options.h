// Options of DistributedDataParallel and join(), with PyTorch 1.13's defaults.
#pragma once

#include <cstddef>

namespace dpx {

// PyTorch's default cap of the first bucket (1 MiB): small, so the first all-reduce starts early.
constexpr std::size_t kDefaultFirstBucketBytes = 1024 * 1024;

struct DistributedDataParallelOptions {
  // Broadcast rank 0's buffers (e.g. BatchNorm running statistics) at every training forward.
  bool broadcast_buffers = true;
  // Cap of every bucket but the first, in MiB of 1024 * 1024 bytes.
  double bucket_cap_mb = 25;
  // Cap of the first bucket, small so that the first all-reduce starts early. A dpx extension:
  // PyTorch fixes it at 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES).
  double first_bucket_cap_mb = kDefaultFirstBucketBytes / (1024.0 * 1024.0);
  // Find the parameters a forward did not reach and reduce them as zero gradients, so a model
  // whose graph changes between iterations does not stall the reduction.
  bool find_unused_parameters = false;
  // .grad tensors become views into the bucket buffers: one copy fewer, less memory.
  bool gradient_as_bucket_view = false;
  // The set of used parameters (and how often each gradient hook fires) is the same in every
  // iteration: learnt in the first one, then relied upon.
  bool static_graph = false;
};

struct JoinOptions {
  // Divide gradients by the initial world size (true, PyTorch's default) or by the number of
  // ranks that still have data in this iteration (false).
  bool divide_by_initial_world_size = true;
  // Stop every rank as soon as one runs out of data, instead of shadowing it: the rank that ran
  // out throws "Rank R exhausted all inputs." from join(), the others "Detected at least one
  // rank that exhausted inputs. Throwing across all ranks." from their next forward (both
  // dpx::DistributedError). Costs one more small all-reduce per synchronised forward.
  bool throw_on_early_termination = false;
};

}  // namespace dpx
