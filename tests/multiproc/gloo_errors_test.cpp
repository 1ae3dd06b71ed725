// The gloo backend turns Gloo's exceptions into dpx's typed errors by the words of their
// messages (src/comm/backends/gloo/translate.cpp). These tests provoke the real faults, so a
// LibTorch release whose Gloo words them differently fails here instead of degrading to a plain
// DistributedError. "Connection refused" and "Broken pipe" have no fault that produces them
// deterministically; a dead peer gives "closed by peer" or "reset by peer".
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx {
namespace {

using std::chrono::milliseconds;
using test::with_timeout;

bool has(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

TEST(GlooErrors, ADeadPeerIsPeerLostInGloosOwnWords) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    auto pg = new_process_group("gloo", server.client(), rank, 2,
                                with_timeout(milliseconds(10000)));
    auto t = at::ones({1 << 12});
    pg->allreduce(t)->wait();
    if (rank == 1) test::kill_this_rank();
    try {
      pg->allreduce(t)->wait();
      ADD_FAILURE() << "an all-reduce without rank 1 succeeded";
    } catch (const PeerLostError& e) {
      const std::string msg = e.what();
      std::cout << "gloo's words: " << msg << "\n";
      EXPECT_TRUE(has(msg, "gloo allreduce failed: a peer closed its connection (")) << msg;
      EXPECT_TRUE(has(msg, "onnection closed by peer") || has(msg, "onnection reset")) << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not PeerLostError: " << e.what();
    }
    EXPECT_THROW(pg->barrier()->wait(), PeerLostError);  // the group stays failed, same type
  }, {std::chrono::seconds(60)});
  EXPECT_TRUE(results[0].ok()) << results[0].output;
}

TEST(GlooErrors, APeerThatNeverCallsIsTimeoutInGloosOwnWords) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    auto pg = new_process_group("gloo", server.client(), rank, 2, with_timeout(milliseconds(1000)));
    auto sync = server.client();
    if (rank == 1) {
      sync->get("rank 0 timed out");  // alive, never calling, until rank 0 gave up
      return;
    }
    auto t = at::ones({4});
    try {
      // Waiting longer than the group's 1 s lets Gloo's own timeout, not the wait's, end it.
      pg->allreduce(t)->wait(milliseconds(10000));
      ADD_FAILURE() << "an all-reduce without rank 1 succeeded";
    } catch (const TimeoutError& e) {
      const std::string msg = e.what();
      std::cout << "gloo's words: " << msg << "\n";
      EXPECT_TRUE(has(msg, "gloo allreduce did not finish within 1000 ms (")) << msg;
      EXPECT_TRUE(has(msg, "imed out") || has(msg, "imeout")) << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not TimeoutError: " << e.what();
    }
    // The group stays failed: the next collective reports the same error at once instead of
    // waiting out the timeout again (Note [Checked issue]).
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(pg->allreduce(t)->wait(milliseconds(10000)), TimeoutError);
    EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(900));
    sync->set("rank 0 timed out", "1");
  }, {std::chrono::seconds(60)});
  test::expect_all_ok(results);
}

}  // namespace
}  // namespace dpx
