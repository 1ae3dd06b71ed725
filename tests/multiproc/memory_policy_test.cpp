// The memory policy (Note [CPU block cache]): each test runs in a fresh child process,
// because the policy is process-wide and sticks from the first call.
#include <malloc.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <torch/torch.h>

#include <thread>

#include "dpx/dpx.h"
#include "dpx/parallel/data_parallel.h"
#include "harness.h"
#include "memory/cpu_block_cache.h"

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

// Bytes glibc holds in mmap()ed blocks, beyond those before, while a 64 MiB tensor is alive and
// after it was freed. Independent of page size, unlike fault counts (transparent huge pages
// fault 2 MiB at a time).
struct Mapped {
  std::size_t during, after;
};
Mapped mapped_around_free() {
  const std::size_t before = ::mallinfo2().hblkhd;
  Mapped m{};
  {
    auto t = torch::empty({kFloats});
    m.during = ::mallinfo2().hblkhd - before;
  }
  m.after = ::mallinfo2().hblkhd - before;
  return m;
}

void run_in_child(const std::function<void()>& fn) {
  test::expect_all_ok(test::run_processes(1, [&](int) { fn(); }));
}

TEST(MemoryPolicy, RetainIsTheDefaultAndKeepsFreedBlocksForTheNextStep) {
  run_in_child([] {
    ::unsetenv("DPX_MALLOC");
    EXPECT_EQ(apply_memory_policy(), MemoryPolicy::kRetain);
    const Mapped m = mapped_around_free();
    EXPECT_GE(m.during, static_cast<std::size_t>(kFloats * 4));
    EXPECT_EQ(m.after, m.during);  // still mapped, in the cache
    EXPECT_EQ(detail::CpuBlockCache::instance().cached_bytes(), static_cast<std::size_t>(kFloats * 4));
    EXPECT_LT(faults_of_warm_step(kFloats), kPages / 10);
  });
}

TEST(MemoryPolicy, RetainServesOtherThreadsToo) {
  run_in_child([] {
    ::unsetenv("DPX_MALLOC");
    apply_memory_policy();
    long faults = -1;
    std::thread([&] { faults = faults_of_warm_step(kFloats); }).join();
    EXPECT_GE(faults, 0);
    EXPECT_LT(faults, kPages / 10);
  });
}

TEST(MemoryPolicy, SystemLeavesFreedBlocksToGoBackToTheKernel) {
  run_in_child([] {
    ::setenv("DPX_MALLOC", "system", 1);
    EXPECT_EQ(apply_memory_policy(), MemoryPolicy::kSystem);
    const Mapped m = mapped_around_free();
    EXPECT_GE(m.during, static_cast<std::size_t>(kFloats * 4));
    EXPECT_EQ(m.after, 0u);
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

TEST(MemoryPolicy, DistributedDataParallelAppliesTheEnvironmentsPolicy) {
  run_in_child([] {
    ::setenv("DPX_MALLOC", "system", 1);
    torch::nn::Linear net(4, 2);
    DistributedDataParallel ddp(net, new_process_group("gloo", Store::hash(), 0, 1));
    EXPECT_EQ(apply_memory_policy(MemoryPolicy::kRetain), MemoryPolicy::kSystem);
  });
}

TEST(MemoryPolicy, DataParallelAppliesTheEnvironmentsPolicy) {
  run_in_child([] {
    ::unsetenv("DPX_MALLOC");
    torch::nn::Linear net(4, 2);
    DataParallel dp(net);
    EXPECT_EQ(apply_memory_policy(MemoryPolicy::kSystem), MemoryPolicy::kRetain);
  });
}

}  // namespace
}  // namespace dpx
