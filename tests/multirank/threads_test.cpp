// Threads as ranks: several groups in one process over one in-memory store.
#include <torch/torch.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "dpx/dpx.h"
#include "support/expect_throws.h"
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

// Sub-groups by member list on a store: {0, 2} and {3, 1} at once (group ranks in the list's
// order), each on its own prefix of the world's store, while rank 4 makes no call at all. The
// starts are staggered so that, were both groups on one prefix, each group's rank 0 would meet
// the other group's rank 1 (Note [Store rounds] in src/store/round.h).
TEST(ThreadsAsRanks, SubgroupsByMemberList) {
  constexpr int kWorld = 5;
  const int start_ms[kWorld] = {0, 0, 300, 150, 0};
  for (const std::string backend : {"gloo", "shm"}) {
    SCOPED_TRACE(backend);
    auto store = Store::hash();
    auto errors = test::run_threads(kWorld, [&](int rank) {
      if (rank == 4) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(start_ms[rank]));
      const std::vector<int> members = rank % 2 == 0 ? std::vector<int>{0, 2}
                                                     : std::vector<int>{3, 1};
      ProcessGroup::Options o;
      o.timeout = std::chrono::milliseconds(5000);
      auto pg = new_process_group(backend, StoreAndRank{store, rank, kWorld}, members, o);
      ASSERT_EQ(pg->size(), 2);
      EXPECT_EQ(members[pg->rank()], rank);
      auto t = at::full({16}, float(rank + 1));
      pg->allreduce(t)->wait();
      EXPECT_TRUE(t.equal(at::full({16}, float(members[0] + members[1] + 2))));
      auto b = at::full({4}, float(rank));
      pg->broadcast(b, {0})->wait();
      EXPECT_TRUE(b.equal(at::full({4}, float(members[0]))));
      auto gathered = at::empty({2}, at::kLong);
      pg->allgather(gathered, at::full({1}, rank, at::kLong))->wait();
      EXPECT_TRUE(gathered.equal(at::tensor({members[0], members[1]}, at::kLong)));
    });
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }
}

TEST(ThreadsAsRanks, SubgroupMemberListsAreChecked) {
  const StoreAndRank world{Store::hash(), 1, 4};
  auto refused = [&](const std::vector<int>& members, const StoreAndRank& w) {
    return test::expect_throws<std::invalid_argument>(
        [&] { new_process_group("gloo", w, members); });
  };
  EXPECT_NE(refused({0, 2}, world).find("this rank (1) is not in the member list [0, 2]"),
            std::string::npos);
  EXPECT_NE(refused({1, 1}, world).find("names rank 1 twice"), std::string::npos);
  EXPECT_NE(refused({1, 4}, world).find("names rank 4, out of range for world size 4"),
            std::string::npos);
  EXPECT_NE(refused({}, world).find("the member list is empty"), std::string::npos);
  EXPECT_NE(refused({0}, StoreAndRank{}).find("rendezvous_store returns them"),
            std::string::npos);
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
