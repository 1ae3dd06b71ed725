// Memory a process group's ranks all reach in place: what lets DDP's buckets skip the copies in
// and out of a backend's own buffers.
//
// Note [Shared buckets]
// On one host, the shm backend copied every bucket into its segment, reduced there and copied
// the result back: with the copies of gradients into buckets and out of them, a 24 M-parameter
// model moved about eight times its gradients' bytes through memory per step, on the cores that
// compute. So the Reducer asks its group for shared memory (allocate_shared, collective) and lays
// its dense buckets out in it: with gradient_as_bucket_view autograd writes each gradient straight
// there. An all-reduce of a tensor in that memory (ShmGroup::do_allreduce finds it by address)
// reads every rank's copy in place; each rank reduces its own slice of all of them and writes
// the result into every rank's copy (shm::allreduce_shared), between two posts. The slices are
// summed in rank order as before, so results are bitwise those of the copying path. Ranks must
// lay their buckets out alike (DDP's are, by construction); the offset is part of the collective's
// descriptor, so a rank whose tensor lies elsewhere fails with MismatchError rather than reading
// the wrong bytes. DPX_SHM_SHARED_BUCKETS=0 keeps the buckets private (the copying path).
#pragma once

#include <ATen/ATen.h>

#include <cstddef>

namespace dpx::detail {

class SharedMemory {
 public:
  virtual ~SharedMemory() = default;
  // Collective: every rank calls it with the same `bytes`, in the same order. A CPU uint8 tensor
  // of `bytes` that the group's collectives reduce in place; undefined where the group keeps
  // none (one rank, or DPX_SHM_SHARED_BUCKETS=0). The memory lives as long as any tensor on it.
  virtual at::Tensor allocate_shared(std::size_t bytes) = 0;
};

}  // namespace dpx::detail
