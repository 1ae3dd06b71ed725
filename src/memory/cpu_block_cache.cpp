#include "memory/cpu_block_cache.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <c10/util/Exception.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdlib>

namespace dpx::detail {
namespace {

void* aligned_alloc_or_null(std::size_t n) {
  void* p = nullptr;
  return ::posix_memalign(&p, c10::gAlignment, n) == 0 ? p : nullptr;
}

std::size_t quarter_of_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * page / 4 : std::size_t{1} << 30;
}

}  // namespace

CpuBlockCache& CpuBlockCache::instance() {
  static CpuBlockCache* cache = [] {
    auto* c = new CpuBlockCache(quarter_of_memory());
    // fork() copies the cache; its lock must not be held by a thread that the child lacks.
    ::pthread_atfork([] { instance().mutex_.lock(); }, [] { instance().mutex_.unlock(); },
                     [] { instance().mutex_.unlock(); });
    return c;
  }();
  return *cache;
}

CpuBlockCache::CpuBlockCache(std::size_t limit) : limit_(limit) {}

void CpuBlockCache::install() { c10::SetCPUAllocator(this, /*priority=*/1); }

std::size_t CpuBlockCache::size_class(std::size_t n) {
  if (n < kMinBytes) return n;
  std::size_t top = std::size_t{1} << (63 - __builtin_clzll(n));  // largest power of two <= n
  const std::size_t step = top / 4;
  return (n + step - 1) / step * step;
}

c10::DataPtr CpuBlockCache::allocate(std::size_t n) const {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (n < kMinBytes) {
    void* p = n == 0 ? nullptr : aligned_alloc_or_null(n);
    TORCH_CHECK(n == 0 || p, "DefaultCPUAllocator: not enough memory: you tried to allocate ", n,
                " bytes.");
    return {p, p, &std::free, cpu};
  }
  const std::size_t size = size_class(n);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
    }
  }
  if (p == nullptr) p = aligned_alloc_or_null(size);
  if (p == nullptr) {  // give every cached block back to malloc, then try once more
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [s, blocks] : free_) {
      for (void* b : blocks) std::free(b);
      blocks.clear();
    }
    cached_ = 0;
    p = aligned_alloc_or_null(size);
  }
  TORCH_CHECK(p, "DefaultCPUAllocator: not enough memory: you tried to allocate ", n, " bytes.");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.emplace(p, size);
  }
  return {p, p, &release, cpu};
}

void CpuBlockCache::release(void* ptr) {
  if (ptr == nullptr) return;
  CpuBlockCache& self = instance();
  std::size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(self.mutex_);
    auto it = self.live_.find(ptr);
    if (it != self.live_.end()) {
      size = it->second;
      self.live_.erase(it);
    }
  }
  if (size == 0) {
    std::free(ptr);  // a small block, reaching here through raw_deleter()
    return;
  }
  self.give_back(ptr, size);
}

void CpuBlockCache::give_back(void* ptr, std::size_t size) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cached_ + size <= limit_) {
      free_[size].push_back(ptr);
      cached_ += size;
      return;
    }
  }
  std::free(ptr);
}

std::size_t CpuBlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

}  // namespace dpx::detail
