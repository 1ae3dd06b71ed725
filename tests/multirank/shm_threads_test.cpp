// The shm backend with threads as ranks: several ranks in one process map one segment.
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx {
namespace {

TEST(ShmThreads, FourRanksAllreduceAndBroadcast) {
  auto store = Store::hash();
  const int world = 4;
  auto errors = test::run_threads(world, [&](int rank) {
    auto pg = new_process_group("shm", store, rank, world);
    for (int64_t n : {3, 100000, 1 << 20}) {
      auto t = at::full({n}, double(rank + 1));
      pg->allreduce(t)->wait();
      EXPECT_TRUE(t.equal(at::full({n}, 10.0)));
      auto b = at::full({n}, int64_t(rank));
      pg->broadcast(b, {2})->wait();
      EXPECT_TRUE(b.equal(at::full({n}, int64_t(2))));
    }
    pg->barrier()->wait();
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
}  // namespace dpx
