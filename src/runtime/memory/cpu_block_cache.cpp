#include "runtime/memory/cpu_block_cache.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <c10/util/Exception.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>

#include "runtime/env_read.h"

namespace dpx::detail {
namespace {

void* aligned_alloc_or_null(std::size_t n) {
  void* p = nullptr;
  return ::posix_memalign(&p, c10::gAlignment, n) == 0 ? p : nullptr;
}

// The cache's own blocks (Note [Blocks the cache lets go]): whole pages, so page-aligned, and
// given back to the kernel the moment the cache lets them go.
void* map_block(std::size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void unmap_block(void* p, std::size_t size) { ::munmap(p, size); }

bool page_aligned(const void* p) {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  return reinterpret_cast<std::uintptr_t>(p) % page == 0;
}

// The cgroup's memory limit (v2, else v1), or 0 when there is none or it cannot be read.
std::size_t cgroup_limit() {
  for (const char* path : {"/sys/fs/cgroup/memory.max",
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string v;
    if (!(in >> v) || v == "max") continue;
    try {
      return static_cast<std::size_t>(std::stoull(v));
    } catch (const std::exception&) {
      continue;
    }
  }
  return 0;
}

}  // namespace

std::size_t CpuBlockCache::default_limit() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  std::size_t memory = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * page
                                             : std::size_t{4} << 30;
  if (const std::size_t cgroup = cgroup_limit(); cgroup > 0) memory = std::min(memory, cgroup);
  const int local = std::max(1, static_cast<int>(detail::env_int("LOCAL_WORLD_SIZE").value_or(1)));
  return memory / 4 / static_cast<std::size_t>(local);
}

CpuBlockCache& CpuBlockCache::instance() {
  static CpuBlockCache* cache = [] {
    const auto mb = detail::env_int("DPX_MALLOC_CACHE_MB", 0);
    auto* c = new CpuBlockCache(mb ? static_cast<std::size_t>(*mb) << 20 : default_limit());
    // fork() copies the cache; its lock must not be held by a thread that the child lacks.
    ::pthread_atfork([] { instance().mutex_.lock(); }, [] { instance().mutex_.unlock(); },
                     [] { instance().mutex_.unlock(); });
    return c;
  }();
  return *cache;
}

CpuBlockCache::CpuBlockCache(std::size_t limit) : limit_(limit) {}

bool CpuBlockCache::install() {
  c10::SetCPUAllocator(this, /*priority=*/1);
  return c10::GetCPUAllocator() == this;
}

std::size_t CpuBlockCache::size_class(std::size_t n) {
  if (n < kMinBytes) return n;
  std::size_t top = std::size_t{1} << (63 - __builtin_clzll(n));  // largest power of two <= n
  const std::size_t step = top / 4;
  return (n + step - 1) / step * step;
}

c10::DataPtr CpuBlockCache::allocate_block(std::size_t n) const {
  const c10::Device cpu(c10::DeviceType::CPU);
  TORCH_CHECK(n <= static_cast<std::size_t>(PTRDIFF_MAX), "DefaultCPUAllocator: can't allocate ",
              n, " bytes: more than any process can address.");
  if (n < kMinBytes) {
    void* p = n == 0 ? nullptr : aligned_alloc_or_null(n);
    TORCH_CHECK(n == 0 || p, "DefaultCPUAllocator: not enough memory: you tried to allocate ", n,
                " bytes.");
    return {p, p, &release, cpu};
  }
  const std::size_t size = size_class(n);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last_asked_[size] = ++clock_;
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      hand_out(p, size);
      return {p, p, &release, cpu};
    }
  }
  void* p = map_block(size);  // outside the lock: the kernel may take its time
  if (p == nullptr && release_cached() > 0) p = map_block(size);
  TORCH_CHECK(p, "DefaultCPUAllocator: not enough memory: you tried to allocate ", n, " bytes.");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    hand_out(p, size);
  }
  return {p, p, &release, cpu};
}

void CpuBlockCache::release(void* ptr) {
  if (ptr == nullptr) return;
  // The cache's own blocks are mapped, so page-aligned; most of malloc's skip the lock.
  if (!page_aligned(ptr)) {
    std::free(ptr);
    return;
  }
  const CpuBlockCache& self = instance();
  std::size_t size = 0;  // stays 0 for a block below kMinBytes that malloc placed on a page
  {
    std::lock_guard<std::mutex> lock(self.mutex_);
    auto it = self.live_.find(ptr);
    if (it != self.live_.end()) {
      size = it->second;
      self.live_.erase(it);
      self.live_bytes_ -= size;
      if (self.make_room(size, size)) {
        self.free_[size].push_back(ptr);
        self.cached_ += size;
        return;
      }
    }
  }
  if (size == 0) {
    std::free(ptr);
  } else {
    unmap_block(ptr, size);
  }
}

void CpuBlockCache::hand_out(void* p, std::size_t size) const {
  live_[p] = size;
  add_live(size);
}

void CpuBlockCache::add_live(std::size_t bytes) const {
  live_bytes_ += bytes;
  peak_live_ = std::max(peak_live_, live_bytes_);
}

// Twice the peak, so backward's blocks of other size classes stay too (Note [Cache bound]).
std::size_t CpuBlockCache::bound() const { return std::min(limit_, 2 * peak_live_); }

bool CpuBlockCache::make_room(std::size_t bytes, std::size_t keep_class) const {
  const std::size_t most = bound();
  if (bytes > most) return false;
  while (cached_ + bytes > most) {
    std::vector<void*>* oldest = nullptr;
    std::size_t oldest_class = 0;
    std::uint64_t oldest_asked = UINT64_MAX;
    for (auto& [size, blocks] : free_) {
      if (size == keep_class || blocks.empty()) continue;
      const std::uint64_t asked = last_asked_[size];
      if (asked < oldest_asked) oldest = &blocks, oldest_class = size, oldest_asked = asked;
    }
    if (oldest == nullptr) return false;
    unmap_block(oldest->back(), oldest_class);
    oldest->pop_back();
    cached_ -= oldest_class;
  }
  return true;
}

std::size_t CpuBlockCache::release_cached() const {
  std::vector<std::pair<void*, std::size_t>> blocks;
  std::size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, list] : free_) {
      for (void* b : list) blocks.emplace_back(b, size);
      list.clear();
    }
    bytes = cached_;
    cached_ = 0;
  }
  for (auto [b, size] : blocks) unmap_block(b, size);
  return bytes;
}

std::size_t CpuBlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

std::size_t CpuBlockCache::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_ + live_bytes_;
}

}  // namespace dpx::detail
