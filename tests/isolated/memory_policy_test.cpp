// The memory policy and the CPU block cache (Note [CPU block cache]). Each test runs in a child of
// a process that never applied a policy, because the policy is process-wide and sticks from the
// first call.
#include <malloc.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <thread>
#include <vector>

#include "dpx/dpx.h"
#include "dpx/data_parallel/data_parallel.h"
#include "support/harness.h"
#include "runtime/memory/cpu_block_cache.h"

namespace dpx {
namespace {

constexpr std::int64_t kFloats = 16 << 20;           // 64 MiB: above glibc's largest mmap threshold
constexpr long kPages = kFloats * 4 / 4096;          // pages in one such block

long minor_faults() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  return r.ru_minflt;
}

// One training "step": allocates, writes and frees a tensor of `floats`, with a small
// allocation in between as a real step has.
void step(std::int64_t floats) {
  auto t = torch::empty({floats});
  t.fill_(1.0f);
  auto small = torch::ones({1000});
}

// Page faults of one step after a warm-up step.
long faults_of_warm_step(std::int64_t floats) {
  step(floats);
  const long before = minor_faults();
  step(floats);
  return minor_faults() - before;
}

using test::run_in_child;

detail::CpuBlockCache& cache() { return detail::CpuBlockCache::instance(); }

// Bytes in mappings of their own: glibc's mmap()ed blocks and the cache's blocks.
std::size_t mapped() { return ::mallinfo2().hblkhd + cache().mapped_bytes(); }

// Bytes mapped, beyond those before, while a 64 MiB tensor is alive and after it was freed.
// Independent of page size, unlike fault counts (transparent huge pages fault 2 MiB at a time).
struct Mapped {
  std::size_t during, after;
};
Mapped mapped_around_free() {
  const std::size_t before = mapped();
  Mapped m{};
  {
    auto t = torch::empty({kFloats});
    m.during = mapped() - before;
  }
  m.after = mapped() - before;
  return m;
}

// One call of a library that mallocs a scratch buffer, writes it and frees it, as OpenMPI's
// blocking all-reduce does; true if glibc mapped the buffer afresh.
bool scratch_call_was_mapped(std::size_t bytes) {
  const std::size_t before = ::mallinfo2().hblkhd;
  // volatile: the compiler may drop writes to a block that is freed unread, and then the block
  volatile char* p = static_cast<char*>(std::malloc(bytes));
  const bool was_mapped = ::mallinfo2().hblkhd > before;
  for (std::size_t i = 0; i < bytes; i += 4096) p[i] = 1;
  std::free(const_cast<char*>(p));
  return was_mapped;
}

constexpr std::size_t kMiB = 1 << 20;

TEST(MemoryPolicy, RetainIsTheDefaultAndKeepsFreedBlocksForTheNextStep) {
  run_in_child([] {
    ::unsetenv("DPX_MALLOC");
    EXPECT_EQ(apply_memory_policy(), MemoryPolicy::kRetain);
    const Mapped m = mapped_around_free();
    EXPECT_GE(m.during, static_cast<std::size_t>(kFloats * 4));
    EXPECT_EQ(m.after, m.during);  // still mapped, in the cache
    EXPECT_EQ(cache().cached_bytes(), 64 * kMiB);
    EXPECT_LT(faults_of_warm_step(kFloats), kPages / 10);
  });
}

TEST(MemoryPolicy, AFreedBlockIsHandedOutAgainForTheSameSizeClass) {
  run_in_child([] {
    apply_memory_policy(MemoryPolicy::kRetain);
    void* first = torch::empty({kFloats}).data_ptr();  // freed at the end of the statement
    auto again = torch::empty({kFloats - 1000});        // same class
    EXPECT_EQ(again.data_ptr(), first);
    auto other = torch::empty({kFloats});  // the one cached block is taken: a new one
    EXPECT_NE(other.data_ptr(), first);
    EXPECT_EQ(cache().cached_bytes(), 0u);
  });
}

TEST(MemoryPolicy, RetainServesOtherThreadsToo) {
  run_in_child([] {
    apply_memory_policy(MemoryPolicy::kRetain);
    long faults = -1;
    std::thread([&] { faults = faults_of_warm_step(kFloats); }).join();
    EXPECT_EQ(cache().cached_bytes(), 64 * kMiB);
    EXPECT_GE(faults, 0);
    EXPECT_LT(faults, kPages / 10);
  });
}

TEST(MemoryPolicy, AFullCachePushesOutTheClassAskedForLeastRecently) {
  run_in_child([] {
    ::setenv("DPX_MALLOC_CACHE_MB", "100", 1);
    apply_memory_policy(MemoryPolicy::kRetain);
    EXPECT_EQ(cache().limit(), 100 * kMiB);
    torch::empty({kFloats});  // 64 MiB, cached
    torch::empty({12 << 20});  // 48 MiB: 112 MiB would exceed 100, so the 64 MiB block goes
    EXPECT_EQ(cache().cached_bytes(), 48 * kMiB);
    torch::empty({40 << 20});  // 160 MiB: more than the whole cache, straight back to malloc
    EXPECT_EQ(cache().cached_bytes(), 48 * kMiB);
    EXPECT_EQ(release_cached_memory(), 48 * kMiB);
    EXPECT_EQ(cache().cached_bytes(), 0u);
  });
}

TEST(MemoryPolicy, RawAllocationsRoundTrip) {
  run_in_child([] {
    apply_memory_policy(MemoryPolicy::kRetain);
    c10::Allocator* allocator = c10::GetCPUAllocator();
    EXPECT_EQ(allocator, &cache());
    // All live at once, so the cache may keep every one of them (Note [Cache bound]).
    std::vector<void*> blocks;
    for (std::size_t n : {std::size_t{0}, std::size_t{100}, 300 * std::size_t{1024}, 8 * kMiB}) {
      blocks.push_back(allocator->raw_allocate(n));
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(blocks.back()) % 64, 0u) << n;
    }
    for (void* p : blocks) allocator->raw_deallocate(p);
    EXPECT_EQ(cache().cached_bytes(), detail::CpuBlockCache::size_class(300 * 1024) + 8 * kMiB);
  });
}

// release() looks up only page-aligned pointers (Note [Blocks the cache lets go]); a small block
// that malloc placed on a page is not the cache's and goes back to malloc.
TEST(MemoryPolicy, ASmallBlockOnAPageGoesBackToMalloc) {
  run_in_child([] {
    apply_memory_policy(MemoryPolicy::kRetain);
    auto big = torch::empty({kFloats});  // so the cache has a block of its own
    void* p = nullptr;
    ASSERT_EQ(::posix_memalign(&p, 4096, 8192), 0);
    cache().raw_deleter()(p);
    EXPECT_EQ(cache().mapped_bytes(), 64 * kMiB);
    EXPECT_EQ(cache().cached_bytes(), 0u);
  });
}

TEST(MemoryPolicy, ThreadsAllocatingAndFreeingAtOnceStayWithinTheLimit) {
  run_in_child([] {
    ::setenv("DPX_MALLOC_CACHE_MB", "24", 1);
    apply_memory_policy(MemoryPolicy::kRetain);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([t] {
        for (int i = 0; i < 200; ++i) {
          auto a = torch::full({(1 + (i + t) % 5) << 17}, static_cast<float>(i));  // 0.5-2.5 MiB
          auto b = torch::empty({(1 + i % 3) << 18});
          ASSERT_EQ(a[0].item<float>(), static_cast<float>(i));
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_LE(cache().cached_bytes(), 24 * kMiB);
    EXPECT_GT(cache().cached_bytes(), 0u);
  });
}

// Sizes that keep changing (one at a time, each a new size class; 40 MiB in all) are not all
// kept: the cache holds at most twice what was live at once (Note [Cache bound]), here twice one
// block of at most 4 MiB.
TEST(MemoryPolicy, TheCacheHoldsNoMoreThanTwiceWhatWasLiveAtOnce) {
  run_in_child([] {
    apply_memory_policy(MemoryPolicy::kRetain);
    for (int i = 0; i < 24; ++i) {
      torch::empty({(1 << 16) + i * (1 << 15)});  // 256 KiB growing to 3.1 MiB, one at a time
    }
    EXPECT_LE(cache().cached_bytes(), 8 * kMiB);
    EXPECT_GT(cache().cached_bytes(), 0u);
    {
      auto a = torch::empty({1 << 20}), b = torch::empty({1 << 20});  // 8 MiB live at once
    }
    EXPECT_GE(cache().cached_bytes(), 8 * kMiB);  // now both fit
  });
}

// (Note [Blocks the cache lets go]) After glibc freed a large mmap()ed block it serves large
// blocks from its heap, where they stay once freed; a block the cache lets go leaves the process.
TEST(MemoryPolicy, ABlockTheCacheLetsGoLeavesTheProcessEvenAfterGlibcRaisedItsThreshold) {
  run_in_child([] {
    ::setenv("DPX_MALLOC_CACHE_MB", "0", 1);  // the cache keeps nothing
    apply_memory_policy(MemoryPolicy::kRetain);
    // Freeing an mmap()ed block under glibc's 32 MiB ceiling raises its threshold to that size.
    scratch_call_was_mapped(16 * kMiB);
    const auto held = [] { return ::mallinfo2().arena + mapped(); };  // heap and mappings
    const std::size_t before = held();
    {
      auto t = torch::empty({1 << 20});  // 4 MiB
      EXPECT_EQ(cache().mapped_bytes(), 4 * kMiB);
    }
    EXPECT_EQ(cache().mapped_bytes(), 0u);
    EXPECT_LT(held(), before + kMiB);
  });
}

// (Note [Blocks the cache lets go]) The cache leaves glibc's mmap threshold to glibc: a library
// that mallocs a large scratch buffer per call (OpenMPI's blocking all-reduce) gets it back from
// glibc's heap, as under DPX_MALLOC=system, instead of a fresh mapping whose pages all fault.
TEST(MemoryPolicy, RetainLeavesGlibcsMmapThresholdAlone) {
  run_in_child([] {
    apply_memory_policy(MemoryPolicy::kRetain);
    constexpr std::size_t kBytes = 4 * kMiB;
    scratch_call_was_mapped(kBytes);  // mapped: freeing it raises glibc's threshold above it
    EXPECT_FALSE(scratch_call_was_mapped(kBytes));  // from the heap, which grows once
    const long before = minor_faults();
    EXPECT_FALSE(scratch_call_was_mapped(kBytes));
    EXPECT_LT(minor_faults() - before, static_cast<long>(kBytes / 4096 / 10));
  });
}

TEST(MemoryPolicy, TheDefaultLimitIsSharedAmongTheHostsProcesses) {
  run_in_child([] {
    ::unsetenv("LOCAL_WORLD_SIZE");
    const std::size_t one = detail::CpuBlockCache::default_limit();
    ::setenv("LOCAL_WORLD_SIZE", "4", 1);
    EXPECT_EQ(detail::CpuBlockCache::default_limit(), one / 4);
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    EXPECT_LE(one, static_cast<std::size_t>(pages) * page / 4);
    EXPECT_GT(one, 0u);
  });
}

TEST(MemoryPolicy, SystemLeavesFreedBlocksToGoBackToTheKernel) {
  run_in_child([] {
    ::setenv("DPX_MALLOC", "system", 1);
    EXPECT_EQ(apply_memory_policy(), MemoryPolicy::kSystem);
    EXPECT_NE(c10::GetCPUAllocator(), &cache());
    const Mapped m = mapped_around_free();
    EXPECT_GE(m.during, static_cast<std::size_t>(kFloats * 4));
    EXPECT_EQ(m.after, 0u);
    EXPECT_EQ(release_cached_memory(), 0u);
  });
}

TEST(MemoryPolicy, SizeClassesWasteAtMostAQuarter) {
  using detail::CpuBlockCache;
  EXPECT_EQ(CpuBlockCache::size_class(1000), 1000u);  // small: malloc's business
  EXPECT_EQ(CpuBlockCache::size_class(CpuBlockCache::kMinBytes), CpuBlockCache::kMinBytes);
  EXPECT_EQ(CpuBlockCache::size_class((1 << 20) + 1), (1u << 20) + (1u << 18));
  EXPECT_EQ(CpuBlockCache::size_class(3 << 20), 3u << 20);
  for (std::size_t n = CpuBlockCache::kMinBytes; n < (std::size_t{1} << 34); n = n * 5 / 3 + 7) {
    const std::size_t c = CpuBlockCache::size_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c - n, n / 4) << n;
    EXPECT_EQ(c % 64, 0u) << n;
  }
}

TEST(MemoryPolicy, TheFirstCallDecides) {
  run_in_child([] {
    ::unsetenv("DPX_MALLOC");
    EXPECT_EQ(apply_memory_policy(MemoryPolicy::kSystem), MemoryPolicy::kSystem);
    EXPECT_EQ(apply_memory_policy(MemoryPolicy::kRetain), MemoryPolicy::kSystem);
    EXPECT_EQ(apply_memory_policy(), MemoryPolicy::kSystem);
  });
}

TEST(MemoryPolicy, BadCacheSizeIsAnErrorNamingTheVariable) {
  run_in_child([] {
    ::setenv("DPX_MALLOC_CACHE_MB", "-1", 1);
    try {
      apply_memory_policy();
      ADD_FAILURE() << "no error";
    } catch (const c10::Error& e) {
      EXPECT_THAT(e.what_without_backtrace(),
                  ::testing::HasSubstr("environment variable DPX_MALLOC_CACHE_MB must be >= 0, "
                                       "got '-1'"));
    }
  });
}

TEST(MemoryPolicy, UnknownValueIsAnErrorNamingTheVariable) {
  run_in_child([] {
    ::setenv("DPX_MALLOC", "jemalloc", 1);
    try {
      apply_memory_policy();
      ADD_FAILURE() << "no error";
    } catch (const c10::Error& e) {
      EXPECT_THAT(e.what_without_backtrace(),
                  ::testing::HasSubstr("environment variable DPX_MALLOC must be retain or "
                                       "system, got 'jemalloc'"));
    }
    ::unsetenv("DPX_MALLOC");
    EXPECT_EQ(apply_memory_policy(), MemoryPolicy::kRetain);  // the failed call applied nothing
  });
}

TEST(MemoryPolicy, InitProcessGroupAppliesTheEnvironmentsPolicy) {
  run_in_child([] {
    ::setenv("DPX_MALLOC", "system", 1);
    auto pg = test::init_single_rank(ProcessOptions{});
    EXPECT_EQ(apply_memory_policy(MemoryPolicy::kRetain), MemoryPolicy::kSystem);
  });
}

TEST(MemoryPolicy, InitProcessGroupRetainsByDefault) {
  run_in_child([] {
    ::unsetenv("DPX_MALLOC");
    auto pg = test::init_single_rank(ProcessOptions{});
    EXPECT_EQ(c10::GetCPUAllocator(), &cache());
    EXPECT_EQ(apply_memory_policy(MemoryPolicy::kSystem), MemoryPolicy::kRetain);
  });
}

TEST(MemoryPolicy, InitProcessGroupLeavesTheAllocatorWhenToldTo) {
  run_in_child([] {
    ::unsetenv("DPX_MALLOC");
    auto pg = test::init_single_rank(std::nullopt);
    ProcessOptions sigpipe_only;
    sigpipe_only.apply_memory_policy = false;
    pg = test::init_single_rank(sigpipe_only);
    EXPECT_NE(c10::GetCPUAllocator(), &cache());
    EXPECT_EQ(apply_memory_policy(MemoryPolicy::kSystem), MemoryPolicy::kSystem);  // the first
  });
}

TEST(MemoryPolicy, InitProcessAppliesTheOneAskedFor) {
  run_in_child([] {
    ::setenv("DPX_MALLOC", "retain", 1);
    ProcessOptions o;
    o.memory_policy = MemoryPolicy::kSystem;  // wins over DPX_MALLOC
    init_process(o);
    EXPECT_NE(c10::GetCPUAllocator(), &cache());
    EXPECT_EQ(apply_memory_policy(), MemoryPolicy::kSystem);
  });
}

TEST(MemoryPolicy, DistributedDataParallelLeavesTheAllocatorAlone) {
  run_in_child([] {
    ::unsetenv("DPX_MALLOC");
    torch::nn::Linear net(4, 2);
    DistributedDataParallel ddp(net, new_process_group("gloo", Store::hash(), 0, 1));
    EXPECT_NE(c10::GetCPUAllocator(), &cache());
    EXPECT_EQ(apply_memory_policy(MemoryPolicy::kSystem), MemoryPolicy::kSystem);  // the first
  });
}

TEST(MemoryPolicy, DataParallelLeavesTheAllocatorAlone) {
  run_in_child([] {
    ::unsetenv("DPX_MALLOC");
    torch::nn::Linear net(4, 2);
    DataParallel dp(net);
    EXPECT_NE(c10::GetCPUAllocator(), &cache());
    EXPECT_EQ(apply_memory_policy(MemoryPolicy::kSystem), MemoryPolicy::kSystem);  // the first
  });
}

}  // namespace
}  // namespace dpx
