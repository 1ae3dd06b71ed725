// Distributed faults end in a typed error within the configured timeout, never a hang.
#include <signal.h>
#include <stdlib.h>

#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/expect_throws.h"
#include "support/harness.h"

namespace dpx {
namespace {

using std::chrono::milliseconds;
using test::expect_throws;
using test::with_timeout;


TEST(Faults, PortAlreadyInUse) {
  test::StoreServer taken;
  InitOptions o;
  o.init_method = "tcp://127.0.0.1:" + std::to_string(taken.port()) + "?rank=0&world_size=2";
  o.timeout = milliseconds(2000);
  auto msg = expect_throws<DistributedError>([&] { init_process_group(o); });
  EXPECT_NE(msg.find("already in use"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(taken.port())), std::string::npos) << msg;
}

TEST(Faults, MasterNeverAnswers) {
  // A port that was free a moment ago and that nobody listens on now.
  std::uint16_t port = test::StoreServer().port();
  InitOptions o;
  o.init_method = "tcp://127.0.0.1:" + std::to_string(port) + "?rank=1&world_size=2";
  o.timeout = milliseconds(1000);
  auto msg = expect_throws<TimeoutError>([&] { init_process_group(o); });
  EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
}

TEST(Faults, RankKilledDuringCollectiveRaisesTypedError) {
  test::StoreServer server;
  auto results = test::run_processes(3, [&](int rank) {
    auto pg = new_process_group("gloo", server.client(), rank, 3, with_timeout(milliseconds(5000)));
    auto t = at::ones({1 << 16});
    pg->allreduce(t)->wait();  // everyone is connected and working
    if (rank == 2) {
      test::kill_this_rank();
    }
    // A dead peer is PeerLostError, long before the 5 s timeout could make it a TimeoutError.
    const auto start = std::chrono::steady_clock::now();
    auto msg = expect_throws<PeerLostError>([&] {
      for (int i = 0; i < 100; ++i) pg->allreduce(t)->wait();
    });
    std::cout << "typed: " << msg << "\n";
    EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(4000));
  }, {std::chrono::seconds(30)});
  EXPECT_EQ(results[2].signal, SIGKILL);
  for (int r : {0, 1}) {
    EXPECT_TRUE(results[r].ok()) << "exit " << results[r].exit_code << " signal " << results[r].signal << ": " << results[r].output;
    EXPECT_NE(results[r].output.find("[rank " + std::to_string(r) + "/3 "), std::string::npos)
        << results[r].output;
  }
}

TEST(Faults, PeerThatNeverCallsTimesOut) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    auto pg = new_process_group("gloo", server.client(), rank, 2, with_timeout(milliseconds(1000)));
    auto sync = server.client();
    if (rank == 0) {
      auto t = at::ones({4});
      EXPECT_THROW(pg->allreduce(t)->wait(), TimeoutError);
      sync->set("rank 0 timed out", "1");
    } else {
      sync->get("rank 0 timed out");  // alive, never calling, until rank 0 gave up
    }
  }, {std::chrono::seconds(30)});
  test::expect_all_ok(results);
}

// Note [Consistency] step 2: on every backend, by default, every rank names the difference at
// once (far within the 30 s timeout), and the group stays usable.
TEST(Faults, MismatchedCollectivesAreNamedOnEveryRankAtOnce) {
  for (const auto& backend : test::backends()) {
    SCOPED_TRACE(backend);
    test::StoreServer server;
    auto results = test::run_processes(2, [&](int rank) {
      auto pg = new_process_group(backend, server.client(), rank, 2,
                                  with_timeout(milliseconds(30000)));
      const auto start = std::chrono::steady_clock::now();
      auto expect_named = [&](const std::function<void()>& issue, const std::string& theirs) {
        auto msg = expect_throws<MismatchError>(issue);  // public: callers can catch it
        EXPECT_NE(msg.find("ranks disagree on the collective"), std::string::npos) << msg;
        EXPECT_NE(msg.find("rank " + std::to_string(1 - rank) + " called " + theirs),
                  std::string::npos) << msg;
      };
      auto sizes = at::ones({rank == 0 ? 10 : 20});
      expect_named([&] { pg->allreduce(sizes)->wait(); },
                   rank == 0 ? "allreduce(sum) on 20 Float" : "allreduce(sum) on 10 Float");
      auto dtypes = rank == 0 ? at::ones({8}, at::kFloat) : at::ones({8}, at::kInt);
      expect_named([&] { pg->allreduce(dtypes)->wait(); },
                   rank == 0 ? "allreduce(sum) on 8 Int" : "allreduce(sum) on 8 Float");
      auto t = at::ones({8});
      expect_named([&] { (rank == 0 ? pg->allreduce(t) : pg->broadcast(t))->wait(); },
                   rank == 0 ? "broadcast(root 0) on 8 Float" : "allreduce(sum) on 8 Float");
      expect_named([&] { pg->allreduce(t, {rank == 0 ? ReduceOp::kSum : ReduceOp::kMax})->wait(); },
                   rank == 0 ? "allreduce(max)" : "allreduce(sum)");
      expect_named([&] { pg->broadcast(t, {rank})->wait(); },
                   rank == 0 ? "broadcast(root 1)" : "broadcast(root 0)");
      EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(10000));
      auto same = at::ones({8});
      pg->allreduce(same)->wait();  // the group stays usable after refused collectives
      EXPECT_TRUE(same.equal(at::full({8}, 2.0f)));
    }, {std::chrono::seconds(60)});
    test::expect_all_ok(results);
  }
}

// Note [Consistency] step 1 (#17.1): settings that shape the exchange must agree, else every
// rank fails at set-up, naming the setting and both values. (Before, different
// DPX_SHM_SMALL_BYTES all-reduced an 80 KB tensor to a wrong value on one rank, silently.)
TEST(Faults, SettingsThatMustAgreeAreCheckedAtSetUp) {
  struct Case {
    const char* variable;
    const char* values[2];
  };
  for (const Case& c : {Case{"DPX_SHM_SMALL_BYTES", {"65536", "4194304"}},
                        Case{"DPX_SHM_SLOT_BYTES", {"65536", "4194304"}}}) {
    SCOPED_TRACE(c.variable);
    test::StoreServer server;
    auto results = test::run_processes(2, [&](int rank) {
      ::setenv(c.variable, c.values[rank], 1);
      auto msg = expect_throws<DistributedError>([&] {
        new_process_group("shm", server.client(), rank, 2, with_timeout(milliseconds(10000)));
      });
      EXPECT_NE(msg.find(std::string("ranks disagree on ") + c.variable + ": this rank has " +
                         c.values[rank] + ", rank " + std::to_string(1 - rank) + " has " +
                         c.values[1 - rank]),
                std::string::npos) << msg;
    }, {std::chrono::seconds(60)});
    test::expect_all_ok(results);
  }
}

TEST(Faults, RanksOnDifferentBackendsFailAtSetUp) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    const std::string mine = rank == 0 ? "shm" : "gloo";
    auto msg = expect_throws<DistributedError>([&] {
      new_process_group(mine, server.client(), rank, 2, with_timeout(milliseconds(10000)));
    });
    EXPECT_NE(msg.find("ranks disagree on backend: this rank has " + mine), std::string::npos)
        << msg;
  }, {std::chrono::seconds(60)});
  test::expect_all_ok(results);
}

}  // namespace
}  // namespace dpx
