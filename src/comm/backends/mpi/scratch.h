// Scratch buffers the mpi backend's all-reduces reuse. Included only by the mpi backend's files.
//
// Note [Scratch reuse]
// The ring and the pair exchange (ring.h) receive into a scratch buffer for every call, up to
// 1 MiB (more where MPI_TAG_UB caps a ring's segments). Made and freed each time by the system
// allocator, it costs glibc's bookkeeping (a request of 1 KiB or more first consolidates its
// fast bins, a free of 64 KiB or more the heap) and page faults where the heap's top was
// trimmed (2-4% of rank 0's samples in a profile of 128 KiB all-reduces, where keeping them
// showed no measurable gain; 4-16 KiB, where it did, was not profiled). Kept, they took
// 0.81-0.93x the time at 4 KiB, 0.88-0.97x at 8 KiB, 0.91-0.97x at 16 KiB in two runs, no change
// measured from 32 KiB up (docs/performance.md, "Scratch reuse, and the pair exchange ...").
// So a group keeps up to kKept freed buffers of at most kKeptBytes and hands out the smallest
// that fits; when it is full, a larger one given back replaces the smallest kept, so small pair
// buffers cannot crowd out a ring's. Buffers move between the caller's thread (a ring takes its
// own when it is issued) and the MPI thread (a pair's, in its round), so the pool takes a lock,
// uncontended in a loop of calls.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace dpx::detail::mpi {

class ScratchPool {
 public:
  static constexpr std::size_t kKept = 4;  // about the buckets DDP has in flight
  // A ring's segment is at most 1 MiB where MPI_TAG_UB leaves it enough rounds (ring.h); larger
  // ones are not kept.
  static constexpr std::size_t kKeptBytes = 2u << 20;

  ScratchPool() { kept_.reserve(kKept); }  // give() never allocates (it runs in destructors)

  // A CPU byte buffer of at least `bytes`: a kept one if one is large enough, else a new one.
  at::Tensor take(std::size_t bytes);
  // Back for the next call: dropped when it is over kKeptBytes, or when kKept are kept and none
  // is smaller (else it replaces the smallest).
  void give(at::Tensor buffer);
  std::size_t kept();  // how many it keeps now

 private:
  std::mutex mutex_;
  std::vector<at::Tensor> kept_;
};

// One buffer on loan from a pool, given back when the loan ends: the ring's and the pair's
// scratch, which lives as long as their data step (so never while MPI still writes into it).
class Scratch {
 public:
  explicit Scratch(std::shared_ptr<ScratchPool> pool) : pool_(std::move(pool)) {}
  ~Scratch() { pool_->give(std::move(buffer_)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // Takes a buffer of at least `bytes` (once) and returns it.
  void* take(std::size_t bytes) {
    TORCH_INTERNAL_ASSERT(!buffer_.defined(), "a scratch buffer taken twice");
    buffer_ = pool_->take(bytes);
    return buffer_.data_ptr();
  }
  bool taken() const { return buffer_.defined(); }
  void* data() const { return buffer_.data_ptr(); }

 private:
  std::shared_ptr<ScratchPool> pool_;
  at::Tensor buffer_;
};

}  // namespace dpx::detail::mpi
