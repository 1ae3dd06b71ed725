// The allocator policy (Note [Retained memory]): each test runs in a fresh child process,
// because the policy is process-wide and sticks from the first call.
#include <stdlib.h>
#include <sys/resource.h>

#include <torch/torch.h>

#include "dpx/dpx.h"
#include "dpx/parallel/data_parallel.h"
#include "harness.h"

namespace dpx {
namespace {

constexpr std::int64_t kFloats = 16 << 20;           // 64 MiB: above glibc's largest mmap threshold
constexpr long kPages = kFloats * 4 / 4096;          // pages in one such block

long minor_faults() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  return r.ru_minflt;
}

// Page faults taken by one "step" that allocates, writes and frees a 64 MiB tensor, measured
// once the heap has settled: what a training step pays for re-allocating its activations.
long faults_of_reallocation() {
  auto step = [] {
    auto t = torch::empty({kFloats});
    t.fill_(1.0f);
    auto small = torch::ones({1000});  // allocated in between, as a step does
  };
  for (int i = 0; i < 8; ++i) step();  // glibc needed 5 here to settle
  const long before = minor_faults();
  step();
  return minor_faults() - before;
}

void run_in_child(const std::function<void()>& fn) {
  test::expect_all_ok(test::run_processes(1, [&](int) { fn(); }));
}

TEST(MemoryPolicy, RetainIsTheDefaultAndKeepsFreedBlocksInTheProcess) {
  run_in_child([] {
    ::unsetenv("DPX_MALLOC");
    EXPECT_EQ(apply_memory_policy(), MemoryPolicy::kRetain);
    EXPECT_LT(faults_of_reallocation(), kPages / 10);
  });
}

TEST(MemoryPolicy, SystemLeavesGlibcToUnmapFreedBlocks) {
  run_in_child([] {
    ::setenv("DPX_MALLOC", "system", 1);
    EXPECT_EQ(apply_memory_policy(), MemoryPolicy::kSystem);
    EXPECT_GT(faults_of_reallocation(), kPages * 9 / 10);
  });
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
