// Threads as ranks: several groups in one process over one in-memory store.
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx {
namespace {

TEST(ThreadsAsRanks, GlooCollectivesOverHashStore) {
  constexpr int kWorld = 4;
  auto store = Store::hash();
  auto errors = test::run_threads(kWorld, [&](int rank) {
    auto pg = new_process_group("gloo", Store::prefix("threads", store), rank, kWorld);
    auto t = at::full({1000}, static_cast<double>(rank));
    pg->allreduce(t, {ReduceOp::kMax})->wait();
    EXPECT_TRUE(t.equal(at::full({1000}, kWorld - 1.0, at::kDouble)));
    auto gathered = at::empty({kWorld * 2}, at::kLong);
    pg->allgather(gathered, at::full({2}, rank, at::kLong))->wait();
    EXPECT_TRUE(gathered.equal(at::arange(kWorld, at::kLong).repeat_interleave(2)));
    pg->barrier()->wait();
  });
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Two groups of one backend on one store, both alive: each must find its own peers, never the
// other group's (c10d's groups key their rendezvous by fixed names; Note [Store rounds]).
TEST(ThreadsAsRanks, TwoGroupsOfABackendShareAStore) {
  for (const std::string backend : {"gloo", "shm"}) {
    SCOPED_TRACE(backend);
    auto store = Store::hash();
    auto errors = test::run_threads(2, [&](int rank) {
      auto a = new_process_group(backend, store, rank, 2);
      auto b = new_process_group(backend, store, rank, 2);
      for (int step = 0; step < 3; ++step) {
        auto x = at::full({8}, float(rank + 1));
        auto y = at::full({8}, float(10 * (rank + 1)));
        auto wy = b->allreduce(y);
        a->allreduce(x)->wait();
        wy->wait();
        EXPECT_TRUE(x.equal(at::full({8}, 3.0f)));
        EXPECT_TRUE(y.equal(at::full({8}, 30.0f)));
      }
    });
    for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }
}

TEST(ThreadsAsRanks, StoreOperations) {
  test::StoreServer server;
  auto a = server.client(), b = server.client(std::chrono::milliseconds(300));
  a->set("k", "v");
  EXPECT_EQ(b->get("k"), "v");
  EXPECT_EQ(a->add("n", 2), 2);
  EXPECT_EQ(b->add("n", 3), 5);
  EXPECT_EQ(a->compare_set("k", "v", "w"), "w");
  EXPECT_EQ(a->compare_set("k", "v", "x"), "w");
  EXPECT_TRUE(b->check({"k", "n"}));
  EXPECT_FALSE(b->check({"absent"}));
  EXPECT_TRUE(a->delete_key("k"));
  try {
    b->get("absent");
    ADD_FAILURE() << "get of a missing key returned";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("get key 'absent'"));
  }
  auto p = Store::prefix("job", a);
  p->set("x", "1");
  EXPECT_EQ(b->get("job/x"), "1");
  EXPECT_EQ(p->port(), server.port());
}

}  // namespace
}  // namespace dpx
