// The multi-process harness itself: a rank that outlives the timeout is killed and reported with
// where it hung (scripts/where_stuck.sh), so a hang in CI or on a GPU machine says where.
#include <signal.h>
#include <unistd.h>

#include <gmock/gmock.h>

#include <chrono>
#include <thread>

#include "support/harness.h"

namespace dpx {
namespace {

TEST(Harness, AHungRankIsKilledAndReportedWhereItHung) {
  test::ProcOptions o;
  o.timeout = std::chrono::seconds(2);
  const auto start = std::chrono::steady_clock::now();
  auto results = test::run_processes(2, [](int rank) {
    std::cerr << "rank " << rank << " started" << std::endl;
    if (rank == 1) ::pause();  // hangs until killed
  }, o);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok()) << results[0].output;
  EXPECT_TRUE(results[1].timed_out);
  EXPECT_THAT(results[1].output, ::testing::HasSubstr("rank 1 started"));
  EXPECT_THAT(results[1].output, ::testing::HasSubstr("--- where it hung:"));
  // The rank's own process and its threads, with their kernel wait channels.
  EXPECT_THAT(results[1].where_stuck, ::testing::HasSubstr("wchan="));
  EXPECT_THAT(results[1].where_stuck, ::testing::HasSubstr("    | rank 1 started"));
  EXPECT_TRUE(results[0].where_stuck.empty());
}

}  // namespace
}  // namespace dpx
