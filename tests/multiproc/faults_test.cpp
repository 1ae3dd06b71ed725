// Distributed faults end in a typed error within the configured timeout, never a hang.
#include <signal.h>
#include <stdlib.h>

#include <thread>

#include <torch/torch.h>

#include "dpx/dpx.h"
#include "harness.h"

namespace dpx {
namespace {

using std::chrono::milliseconds;

ProcessGroup::Options short_timeout(int ms) {
  ProcessGroup::Options o;
  o.timeout = milliseconds(ms);
  return o;
}

// Runs `body` and returns the message of the DistributedError subtype E it throws.
template <typename E, typename F>
std::string expect_throws(F&& body) {
  try {
    body();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}

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
    auto pg = new_process_group("gloo", server.client(), rank, 3, short_timeout(5000));
    auto t = at::ones({1 << 16});
    pg->allreduce(t)->wait();  // everyone is connected and working
    if (rank == 2) {
      test::kill_this_rank();
    }
    try {
      for (int i = 0; i < 100; ++i) pg->allreduce(t)->wait();
      ADD_FAILURE() << "collectives kept succeeding without rank 2";
    } catch (const PeerLostError& e) {
      std::cout << "typed: " << e.what() << "\n";
    } catch (const TimeoutError& e) {
      std::cout << "typed: " << e.what() << "\n";
    }
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
    auto pg = new_process_group("gloo", server.client(), rank, 2, short_timeout(1000));
    if (rank == 0) {
      auto t = at::ones({4});
      EXPECT_THROW(pg->allreduce(t)->wait(), TimeoutError);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    }
  }, {std::chrono::seconds(30)});
  test::expect_all_ok(results);
}

TEST(Faults, MismatchedCollectivesAreNamedWithDebugDetail) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    ::setenv("DPX_DEBUG", "DETAIL", 1);
    auto pg = new_process_group("gloo", server.client(), rank, 2, short_timeout(5000));
    auto sizes = at::ones({rank == 0 ? 10 : 20});
    auto msg = expect_throws<DistributedError>([&] { pg->allreduce(sizes)->wait(); });
    EXPECT_NE(msg.find("ranks disagree"), std::string::npos) << msg;
    EXPECT_NE(msg.find(rank == 0 ? "20 Float" : "10 Float"), std::string::npos) << msg;
    auto dtypes = rank == 0 ? at::ones({8}, at::kFloat) : at::ones({8}, at::kInt);
    msg = expect_throws<DistributedError>([&] { pg->allreduce(dtypes)->wait(); });
    EXPECT_NE(msg.find(rank == 0 ? "8 Int" : "8 Float"), std::string::npos) << msg;
    auto same = at::ones({8});
    pg->allreduce(same)->wait();  // the group stays usable after a refused collective
    EXPECT_TRUE(same.equal(at::full({8}, 2.0f)));
  }, {std::chrono::seconds(30)});
  test::expect_all_ok(results);
}

}  // namespace
}  // namespace dpx
