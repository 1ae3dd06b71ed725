// The stall inspector (Note [Stall inspector]): a rank that waits past the threshold names,
// in its log, the ranks that have not issued the collective and where they are, on every
// backend; the wait itself goes on until the group's timeout.
#include <torch/torch.h>

#include <thread>

#include "multiproc/ddp_models.h"
#include "dpx/dpx.h"
#include "support/expect_throws.h"
#include "support/harness.h"

namespace dpx {
namespace {

using std::chrono::milliseconds;

ProcessGroup::Options stall_options(milliseconds timeout) {
  auto o = test::with_timeout(timeout);
  o.stall_threshold = milliseconds(300);
  return o;
}

// Returns once rank 0's latest stall report (the line it logged, which the inspector also leaves
// in the store) mentions `needle`: a late rank waits for this instead of a guessed sleep. An
// earlier collective may have been reported first when a rank started slowly, hence the poll.
void wait_for_report(Store& store, const std::string& needle) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (store.check({"dpx_stall/report/0"}) &&
        store.get("dpx_stall/report/0").find(needle) != std::string::npos) {
      return;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  FAIL() << "rank 0 never reported a stall mentioning '" << needle << "'";
}

// Rank 1 arrives late; it goes on only once rank 0 has reported it (explicit sync, no guessed
// sleep), and the collective then completes with the right sum.
TEST(StallInspector, LateRankIsNamedAndTheCollectiveCompletes) {
  for (const auto& backend : test::backends()) {
    SCOPED_TRACE(backend);
    test::StoreServer server;
    auto results = test::run_processes(2, [&](int rank) {
      auto pg = new_process_group(backend, server.client(), rank, 2,
                                  stall_options(milliseconds(30000)));
      auto t = at::ones({1000});
      pg->allreduce(t)->wait();
      if (rank == 1) wait_for_report(*server.client(), "collective #2 ");
      t.fill_(1);
      pg->allreduce(t)->wait();
      EXPECT_EQ(t[0].item<float>(), 2);
    }, {std::chrono::seconds(60)});
    test::expect_all_ok(results);
    const auto& log = results[0].output;
    EXPECT_NE(log.find("[rank 0/2 "), std::string::npos) << log;
    EXPECT_NE(log.find("stall: collective #2 (allreduce 1000 Float)"), std::string::npos) << log;
    EXPECT_NE(log.find("1 rank(s) have not issued it yet: rank 1 (last issued #1 allreduce "
                       "1000 Float)"), std::string::npos) << log;
    EXPECT_NE(log.find("Still waiting, until the timeout of 30000 ms"), std::string::npos) << log;
    EXPECT_EQ(results[1].output.find("stall:"), std::string::npos) << results[1].output;
  }
}

// Rank 1 skips a barrier: rank 0 names it, keeps waiting, and times out as it would have.
TEST(StallInspector, SkippedCollectiveIsNamedThenTimesOut) {
  for (const auto& backend : test::backends()) {
    SCOPED_TRACE(backend);
    test::StoreServer server;
    auto results = test::run_processes(2, [&](int rank) {
      auto pg = new_process_group(backend, server.client(), rank, 2,
                                  stall_options(milliseconds(3000)));
      auto t = at::ones({8}, at::kDouble);
      pg->allreduce(t)->wait();
      auto sync = server.client();
      if (rank == 0) {
        test::expect_throws<TimeoutError>([&] { pg->barrier()->wait(); });
        sync->set("rank 0 timed out", "1");
      } else {
        sync->get("rank 0 timed out");  // alive, never calling the barrier
      }
    }, {std::chrono::seconds(60)});
    test::expect_all_ok(results);
    const auto& log = results[0].output;
    EXPECT_NE(log.find("stall: collective #2 (barrier)"), std::string::npos) << log;
    EXPECT_NE(log.find("rank 1 (last issued #1 allreduce 8 Double)"), std::string::npos) << log;
  }
}

// Under DDP the log names the bucket and its parameters.
TEST(StallInspector, DdpBucketIsNamed) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    auto pg = new_process_group("shm", server.client(), rank, 2,
                                stall_options(milliseconds(30000)));
    torch::manual_seed(5);
    test::Mlp net;
    DistributedDataParallel ddp(net, pg);
    auto x = torch::randn({4, 16});
    if (rank == 1) wait_for_report(*server.client(), "DDP bucket");
    ddp->forward(x).sum().backward();
  }, {std::chrono::seconds(60)});
  test::expect_all_ok(results);
  const auto& log = results[0].output;
  EXPECT_NE(log.find("DDP bucket 0 of 1, 6928 bytes: fc1.weight, fc1.bias, fc2.weight, "
                     "fc2.bias, fc3.weight, fc3.bias)"), std::string::npos) << log;
  EXPECT_NE(log.find("rank(s) have not issued it yet: rank 1"), std::string::npos) << log;
}

TEST(StallInspector, ThresholdFromEnvironmentIsChecked) {
  test::run_in_child([] {
    ::setenv("DPX_STALL_CHECK_SECONDS", "soon", 1);
    test::StoreServer server;
    ProcessGroup::Options o;
    auto msg = test::expect_throws<c10::Error>(
        [&] { new_process_group("shm", server.client(), 0, 1, o); });
    EXPECT_NE(msg.find("DPX_STALL_CHECK_SECONDS must be a number of seconds >= 0"),
              std::string::npos) << msg;
  });
}

}  // namespace
}  // namespace dpx
