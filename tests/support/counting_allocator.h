// A CPU allocator for tests of memory use: it counts the bytes of the tensors alive in this
// process and their peak, and with a limit refuses an allocation past it as an out-of-memory
// would (a c10::Error from the allocation): a per-process memory limit on tensors that does not
// depend on what else the process maps.
#pragma once

#include <atomic>
#include <cstddef>

#include "runtime/compat/allocator.h"

namespace dpx::test {

class CountingAllocator final : public compat::Allocator {
 public:
  // Wraps the CPU allocator in force (dpx's block cache, after dpx::init_process) and takes its
  // place, from now on in this process. Call it once per process, in a forked child.
  static CountingAllocator& install();

  c10::DataPtr allocate_block(std::size_t n) const override;

  std::size_t live() const { return live_.load(); }
  std::size_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(live_.load()); }
  // 0: no limit.
  void set_limit(std::size_t bytes) { limit_.store(bytes); }

 private:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}
  static void release(void* context);

  c10::Allocator* inner_;
  mutable std::atomic<std::size_t> live_{0}, peak_{0}, limit_{0};
};

}  // namespace dpx::test
