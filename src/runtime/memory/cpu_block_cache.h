// LibTorch's CPU allocator with a cache of freed large blocks (Note [CPU block cache]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/compat/allocator.h"

namespace dpx::detail {

// Note [CPU block cache]
// LibTorch allocates CPU tensors with posix_memalign. glibc serves a block above its mmap
// threshold (128 KiB, rising to 32 MiB as blocks are freed) with a fresh mmap() and unmaps it when
// it is freed. A training step frees and re-allocates the same activations, im2col buffers and
// gradients every step, so every step faults those pages in again and the kernel zeroes each one.
// For the Fashion-MNIST CNN (batch 64, one thread, one BLAS thread) that was 4,600 page faults and
// 8 ms of system time in a 49 ms step; with this cache the step took 39 ms (`dpx-bench ddp`
// reports faults per step).
// This cache keeps freed blocks of at least kMinBytes, keyed by size class (four classes per
// power of two, so at most a quarter is wasted), and hands them out again for a request of the
// same class, as PyTorch's caching allocators do for GPU memory. Smaller blocks go straight to
// malloc, which already reuses them well.
// Why not only tune glibc instead (mallopt M_MMAP_MAX=0): a freed block then stays in the heap,
// but posix_memalign asks 64 bytes more than that block holds, so a same-size request does not fit
// until the small blocks around it are freed and merged. Measured with a 64 MiB tensor per step,
// the heap grew by 7 such blocks before it settled. Per-thread arenas kept unmapping blocks above
// 64 MiB as well.
// The cache maps its blocks itself rather than asking malloc (Note [Blocks the cache lets go]).
// The cache holds at most `limit` bytes of free blocks, and never more than twice the most bytes
// that were handed out at once (Note [Cache bound]). A block freed beyond that first pushes out
// blocks of the classes asked for least recently (sizes a past phase used, e.g. evaluation), and
// is unmapped if that is not enough. Tensors allocated before the cache was installed keep
// their own deleter.
//
// Note [Cache bound]
// A training step frees and asks again for what it had live at its peak, and more: a block freed
// in backward (an activation) serves only a request of its own size class, so the temporaries
// and gradients backward asks for while activations are still live need blocks of their own.
// Bounded by the peak alone, the cache let those go at the end of every step and the next step
// faulted them in again: the Fashion-MNIST CNN took 9,200 page faults per step on 2 ranks
// (18 MB per rank), a 24 M-parameter MLP whose gradients are transient (Note [Shared buckets])
// 33,000; bounded by twice the peak, 1 and 4 (`dpx-bench ddp`). The shared buckets need no
// account here: counted as handed out or not, the MLP on them faulted 2-7 times per step
// (alternated, 3 rounds). Without a bound, a program whose sizes keep changing (a soak of
// 10,000 random collectives, varying batch shapes) filled the cache up to `limit` (a quarter of
// the memory, per local rank) with blocks of sizes gone by:
// 716 MiB after 2,000 random collectives and growing, where the peak of live blocks was about
// 100 MiB (docs/performance.md, "Memory of a long run"); twice the peak stops that at 200 MiB.
//
// Note [Blocks the cache lets go]
// The cache decides which large blocks stay; those it gives back must leave the process. So it
// maps each block itself (mmap, whole pages) and unmaps the blocks it lets go. Had it taken them
// from malloc, free() would leave them in glibc's heap once glibc had raised its mmap threshold
// (it does, up to 32 MiB, as mmap()ed blocks are freed): 80-100 MiB more per rank in a soak of
// random collectives (docs/performance.md, "Memory of a long run").
// Until 2026-11-29 the cache took its blocks from posix_memalign and fixed glibc's threshold at
// kMinBytes (mallopt M_MMAP_THRESHOLD) instead. That made every malloc of 256 KiB or more in the
// process a fresh mapping whose pages fault on every use: OpenMPI's blocking all-reduce mallocs a
// scratch buffer of the message's size per call and took 2.4-3.6x raw MPI from 256 KiB up
// (docs/performance.md, "The cache maps its own blocks"). glibc's threshold is now glibc's own, so
// other libraries' large temporaries are reused from its heap as under DPX_MALLOC=system.
// Blocks are told apart when freed by their address: the cache's are page-aligned, so release()
// looks up only page-aligned pointers; one that malloc placed on a page is not in live_ and goes
// to free().
class CpuBlockCache final : public compat::Allocator {
 public:
  static constexpr std::size_t kMinBytes = 256 * 1024;

  // The process's cache, created on first use and never destroyed, since tensors may outlive
  // static destructors. Its limit: DPX_MALLOC_CACHE_MB, else default_limit().
  static CpuBlockCache& instance();

  // A quarter of the memory this process may use (physical memory, or the cgroup's limit if
  // lower), shared among the LOCAL_WORLD_SIZE processes of this host.
  static std::size_t default_limit();

  // Makes this cache LibTorch's CPU allocator. False if an allocator registered with a higher
  // priority keeps the place.
  bool install();

  c10::DataPtr allocate_block(std::size_t n) const override;
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  std::size_t cached_bytes() const;
  // The bytes of the cache's mapped blocks: handed out and cached.
  std::size_t mapped_bytes() const;
  std::size_t limit() const { return limit_; }
  // Gives every cached block back to the kernel; returns the bytes released.
  std::size_t release_cached() const;

  // The size a request of n bytes is served with.
  static std::size_t size_class(std::size_t n);

 private:
  explicit CpuBlockCache(std::size_t limit);
  static void release(void* ptr);
  // What the cache may hold now: the limit, or less while twice the peak of live blocks is lower.
  // Needs mutex_.
  std::size_t bound() const;
  // Records `p` (of class `size`) as handed out. Needs mutex_.
  void hand_out(void* p, std::size_t size) const;
  // Adds to the bytes handed out and their peak. Needs mutex_.
  void add_live(std::size_t bytes) const;
  // Frees cached blocks of other classes, least recently asked for first, until `bytes` more fit
  // under bound(). Needs mutex_.
  bool make_room(std::size_t bytes, std::size_t keep_class) const;

  const std::size_t limit_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<void*, std::size_t> live_;  // handed-out block -> its size class
  mutable std::unordered_map<std::size_t, std::vector<void*>> free_;
  mutable std::unordered_map<std::size_t, std::uint64_t> last_asked_;  // class -> request clock
  mutable std::uint64_t clock_ = 0;
  mutable std::size_t cached_ = 0;
  mutable std::size_t live_bytes_ = 0;  // handed out now
  mutable std::size_t peak_live_ = 0;   // the most ever handed out at once (Note [Cache bound])
};

}  // namespace dpx::detail
