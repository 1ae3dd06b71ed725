// What fully_shard saves: the peak of tensor memory per rank in a training step (parameters,
// gradients, Adam's two states and the step's transients) on 2, 3 and 4 ranks against DDP on
// the same model; and a model whose DDP training does not fit a per-process memory limit
// trains under fully_shard within it. Tensor memory is counted by test::CountingAllocator.
#include <torch/torch.h>

#include <cstdio>

#include "support/counting_allocator.h"
#include "dpx/dpx.h"
#include "dpx/fsdp/fully_shard.h"
#include "support/fsdp_memory.h"
#include "support/harness.h"

namespace dpx::fsdp_memory_test {
namespace {

using test::MemoryWrap;

TEST(FsdpMemory, PeakPerRankIsAboutOneNthPlusUnitsAgainstDdp) {
  for (int world : {2, 3, 4}) {
    test::StoreServer server;
    auto results = test::run_processes(world, [&](int rank) {
      torch::set_num_threads(1);
      auto& memory = test::CountingAllocator::install();
      test::expect_fsdp_peak_about_one_nth(new_process_group("shm", server.client(), rank, world),
                                           memory);
    });
    for (const auto& r : results) std::cout << r.output;
    test::expect_all_ok(results);
  }
}

// 16 MiB of parameters: DDP needs about 5 times that per rank, fully_shard on 4 ranks a fifth of
// it plus a few units. Under a 40 MiB limit per process, DDP runs out of memory; fully_shard
// trains.
TEST(FsdpMemory, TrainsWhereDdpDoesNotFitTheMemoryLimit) {
  constexpr int kUnits = 16, kWorld = 4;
  constexpr std::size_t kLimit = 40u << 20;
  for (MemoryWrap wrap : {MemoryWrap::kDdp, MemoryWrap::kFsdp}) {
    test::StoreServer server;
    auto results = test::run_processes(kWorld, [&](int rank) {
      torch::set_num_threads(1);
      auto& memory = test::CountingAllocator::install();
      memory.set_limit(kLimit);
      auto pg = new_process_group("shm", server.client(), rank, kWorld,
                                  test::with_timeout(std::chrono::seconds(20)));
      try {
        const auto peak = test::train_wide_net(wrap, kUnits, 3, pg, memory);
        std::printf("trained within the limit, peak %.2f MiB\n", peak / 1048576.0);
      } catch (const std::exception& e) {
        std::printf("failed: %s\n", e.what());
      }
    }, {std::chrono::seconds(120)});
    for (const auto& r : results) {
      EXPECT_TRUE(r.ok()) << r.output;
      if (wrap == MemoryWrap::kFsdp) {
        EXPECT_NE(r.output.find("trained within the limit"), std::string::npos) << r.output;
      } else {
        EXPECT_NE(r.output.find("CPU out of memory"), std::string::npos) << r.output;
      }
    }
  }
}

}  // namespace
}  // namespace dpx::fsdp_memory_test
