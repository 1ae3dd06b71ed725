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
// lay their buckets out alike (DDP's are, by construction); the block's number and the offset are
// part of the collective's descriptor (SharedBlocks), so a rank whose tensor lies elsewhere fails
// with MismatchError rather than reading the wrong bytes. DPX_SHM_SHARED_BUCKETS=0 keeps the
// buckets private (the copying path).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

namespace dpx::detail {

class SharedMemory {
 public:
  virtual ~SharedMemory() = default;
  // Collective: every rank calls it with the same `bytes`, in the same order. A CPU uint8 tensor
  // of `bytes` that the group's collectives reduce in place; undefined where the group keeps
  // none (one rank, or DPX_SHM_SHARED_BUCKETS=0). The memory lives as long as any tensor on it.
  virtual at::Tensor allocate_shared(std::size_t bytes) = 0;
};

// The blocks of shared memory a group handed out (allocate_shared), by the address range of this
// rank's copy: what its all-reduces look a tensor up in. Each block gets a number, alike on every
// rank (allocate_shared is collective), that the descriptor carries beside the offset, so a rank
// whose tensor lies in another block at the same offset fails with MismatchError, not a sum of
// two blocks. Holds them weakly: a block lives as long as a tensor on it. Thread-safe.
template <class Block>
class SharedBlocks {
 public:
  // Numbers run 1, 2, ..., `most`, 1, ...: never 0, which says "not shared".
  explicit SharedBlocks(std::int16_t most) : most_(most) {}

  // Remembers `block`, whose copy for this rank is [mine, mine + bytes).
  void add(const std::shared_ptr<Block>& block, const char* mine, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                  [](const Entry& e) { return e.block.expired(); }),
                   entries_.end());
    entries_.push_back({block, mine, bytes, static_cast<std::int16_t>(1 + made_++ % most_)});
  }

  struct Found {
    std::shared_ptr<Block> block;  // null: `tensor` is not (wholly) in one
    std::int16_t number = 0;
    std::size_t offset = 0;  // into this rank's copy: a multiple of 64
  };
  // The block a CPU tensor lies in, contiguous and whole, at an offset the descriptor can carry
  // (CollectiveDescriptor::root: 64-byte lines in an int32).
  Found find(const at::Tensor& tensor) const {
    if (!tensor.is_cpu() || !tensor.is_contiguous() || tensor.numel() == 0) return {};
    const auto* begin = static_cast<const char*>(tensor.data_ptr());
    const auto* end = begin + tensor.nbytes();
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Entry& e : entries_) {
      auto block = e.block.lock();
      if (!block || begin < e.mine || end > e.mine + e.bytes) continue;
      const auto offset = static_cast<std::size_t>(begin - e.mine);
      if (offset % 64 != 0 || offset / 64 > std::numeric_limits<std::int32_t>::max()) return {};
      return {std::move(block), e.number, offset};
    }
    return {};
  }

 private:
  struct Entry {
    std::weak_ptr<Block> block;
    const char* mine;  // read only while `block` is alive
    std::size_t bytes;
    std::int16_t number;
  };
  const std::int16_t most_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  std::int64_t made_ = 0;
};

}  // namespace dpx::detail
