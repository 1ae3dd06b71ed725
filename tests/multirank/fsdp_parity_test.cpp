// fully_shard trains as one process on the whole batch does: float64, units whose rows do not
// divide by the world size, a frozen parameter, the root's own parameters, a buffer, a tied
// parameter; world sizes 2, 3 and 4 (threads as ranks; tests/mpi runs the same check under
// mpirun).
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "dpx/fsdp/fully_shard.h"
#include "support/fsdp_models.h"
#include "support/fsdp_parity.h"
#include "support/harness.h"

namespace dpx {
namespace {

// Returns the collectives rank 0 issued in training.
std::uint64_t expect_parity(const std::string& backend, int world, bool tied,
                            const test::MakeOptimizer& make, const FullyShardOptions& options = {},
                            const test::FsdpSetup& setup = nullptr) {
  SCOPED_TRACE(backend + ", world " + std::to_string(world) + (tied ? ", tied" : ""));
  const auto data = test::make_fsdp_parity_data(world, tied);
  const auto want = test::train_one_process(tied, data, make);
  auto store = Store::hash();
  std::atomic<std::uint64_t> issued{0};
  auto errors = test::run_threads(world, [&](int rank) {
    auto pg = new_process_group(backend, store, rank, world);
    const auto n = test::train_sharded_and_compare(pg, tied, data, make, want, options, setup);
    if (rank == 0) issued = n;
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return issued;
}

TEST(FsdpParity, SgdMatchesOneProcessOnTheWholeBatch) {
  for (const std::string backend : {"shm", "gloo"}) {
    for (int world : {2, 3, 4}) expect_parity(backend, world, /*tied=*/false, test::sgd);
  }
}

TEST(FsdpParity, AdamWWithATiedParameter) {
  for (int world : {2, 3}) expect_parity("shm", world, /*tied=*/true, test::adamw);
}

// The schedule options change when parameters are gathered, never the result; the collectives
// counted on rank 0 show each option took effect.
TEST(FsdpParity, ScheduleOptionsKeepTheResult) {
  constexpr int kWorld = 3;
  const auto baseline = expect_parity("shm", kWorld, false, test::sgd);
  FullyShardOptions keep;
  keep.reshard_after_forward = false;
  const auto kept = expect_parity("shm", kWorld, false, test::sgd, keep);
  EXPECT_LT(kept, baseline) << "reshard_after_forward=false: backward all-gathers nothing";
  EXPECT_EQ(expect_parity("shm", kWorld, false, test::sgd, {}, [](auto& model) {
              model.fsdp().set_reshard_after_forward(false);  // every unit: recurse is true
            }), kept) << "set_reshard_after_forward(false) after wrapping acts as the option";
  FullyShardOptions no_prefetch;
  no_prefetch.forward_prefetch = no_prefetch.backward_prefetch = false;
  EXPECT_EQ(expect_parity("shm", kWorld, false, test::sgd, no_prefetch), baseline);
  EXPECT_EQ(expect_parity("shm", kWorld, false, test::sgd, {}, [](auto& model) {
              model.fsdp().unshard();  // before training: the first forward gathers nothing
              model.fsdp().reshard();
            }), baseline);
}

}  // namespace
}  // namespace dpx
