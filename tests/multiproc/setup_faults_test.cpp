// Set-up faults that every rank must learn of at once, with the real cause, while rank 0 hosts
// the store (init_process_group over tcp://): a rank that cannot open the shm segment
// (Note [Attach failures] in src/comm/backends/shm/segment.h), settings that differ
// (Note [Failing together] in src/store/round.h), world sizes that differ and a rank started
// twice (Note [Members] in src/comm/plan/members.h).
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/expect_throws.h"
#include "support/harness.h"
#include "support/launcher_harness.h"

namespace dpx {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using test::over_tcp;

// init_process_group's error on this rank, and how long it took to come.
std::string setup_error(const InitOptions& o, double& seconds) {
  const auto start = Clock::now();
  std::string msg = test::expect_throws<DistributedError>([&] { init_process_group(o); });
  seconds = test::seconds_since(start);
  return msg;
}

TEST(SetupFaults, ARankAsAnotherUserFailsEveryRankAtOnceWithItsReason) {
  const int port = test::free_tcp_port();
  auto results = test::run_processes(3, [&](int rank) {
    if (rank == 1) {  // nobody may not open root's /proc/<pid>/fd
      ASSERT_EQ(::setgid(65534), 0);
      ASSERT_EQ(::setuid(65534), 0);
    }
    double took = 0;
    const std::string msg = setup_error(over_tcp(port, rank, 3, "shm"), took);
    EXPECT_TRUE(has(msg, "shm backend: rank 1 cannot open rank 0's segment: open(/proc/")) << msg;
    EXPECT_TRUE(has(msg, "Permission denied")) << msg;
    EXPECT_LT(took, 3.0) << "the group timeout is 15 s";
  }, {60s});
  test::expect_all_ok(results);
}

// Rank 1 in a pid namespace of its own (a container), with its own /proc: rank 0 is alive, and
// the error must say where it is, not that it exited.
TEST(SetupFaults, ARankInAnotherPidNamespaceIsToldSoAndRank0LearnsIt) {
  const int port = test::free_tcp_port();
  auto results = test::run_processes(2, [&](int rank) {
    if (rank == 0) {
      double took = 0;
      const std::string msg = setup_error(over_tcp(port, 0, 2, "shm"), took);
      EXPECT_TRUE(has(msg, "rank 1 cannot open rank 0's segment: rank 0 runs in another pid "
                           "namespace")) << msg;
      EXPECT_LT(took, 3.0);
      return;
    }
    ASSERT_EQ(::unshare(CLONE_NEWPID | CLONE_NEWNS), 0) << strerror(errno);
    const pid_t child = ::fork();  // the first process of the new pid namespace
    if (child == 0) {
      bool ok = ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
                ::mount("proc", "/proc", "proc", 0, nullptr) == 0;
      std::string msg;
      try {
        init_process_group(over_tcp(port, 1, 2, "shm"));
      } catch (const DistributedError& e) {
        msg = e.what();
      }
      ok = ok && has(msg, "rank 1 cannot open rank 0's segment: rank 0 runs in another pid "
                          "namespace") && !has(msg, "exited");
      if (!ok) std::fprintf(stderr, "rank 1 in its pid namespace got: %s\n", msg.c_str());
      ::_exit(ok ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }, {60s});
  test::expect_all_ok(results);
}

// Rank 0 finds the difference first and its error takes the store down with it; rank 1 must
// still report the difference, not "the store server went away".
TEST(SetupFaults, SettingsThatDifferAreWhatEveryRankReportsWhenRank0HostsTheStore) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    const int port = test::free_tcp_port();
    auto results = test::run_processes(2, [&](int rank) {
      ::setenv("DPX_SHM_SMALL_BYTES", rank == 0 ? "65536" : "4194304", 1);
      double took = 0;
      const std::string msg = setup_error(over_tcp(port, rank, 2, "shm"), took);
      EXPECT_TRUE(has(msg, "ranks disagree on DPX_SHM_SMALL_BYTES")) << msg;
      EXPECT_LT(took, 3.0);
    }, {60s});
    test::expect_all_ok(results);
  }
}

// Rank 0 started with 2, the others with 3: every rank fails at once, naming both sizes.
TEST(SetupFaults, RanksThatDisagreeOnTheWorldSizeAllFailAtOnceNamingBoth) {
  const int port = test::free_tcp_port();
  auto results = test::run_processes(3, [&](int rank) {
    const int world = rank == 0 ? 2 : 3;
    double took = 0;
    const std::string msg = setup_error(over_tcp(port, rank, world, "gloo"), took);
    EXPECT_TRUE(has(msg, "ranks disagree on the world size: this rank has " +
                         std::to_string(world) + ", rank ")) << msg;
    EXPECT_TRUE(has(msg, rank == 0 ? ") has 3" : "rank 0 (")) << msg;
    EXPECT_LT(took, 3.0) << "the group timeout is 15 s";
  }, {60s});
  test::expect_all_ok(results);
}

// Rank 0 started with 3 and only one peer, started with 2: rank 0 waits for a rank 2 that does
// not exist until rank 1 tells it.
TEST(SetupFaults, ARankWaitingForRanksThatDoNotExistIsToldAtOnce) {
  const int port = test::free_tcp_port();
  auto results = test::run_processes(2, [&](int rank) {
    const int world = rank == 0 ? 3 : 2;
    double took = 0;
    const std::string msg = setup_error(over_tcp(port, rank, world, "auto"), took);
    EXPECT_TRUE(has(msg, "ranks disagree on the world size: this rank has " +
                         std::to_string(world) + ", rank " + (rank == 0 ? "1" : "0"))) << msg;
    EXPECT_LT(took, 3.0);
  }, {60s});
  test::expect_all_ok(results);
}

// Two processes started as rank 1: the second to claim it fails at once; the group goes on
// with the first.
TEST(SetupFaults, ASecondProcessWithTheSameRankFailsAtOnce) {
  const int port = test::free_tcp_port();
  test::TempDir dir;
  auto results = test::run_processes(3, [&](int process) {
    const int rank = process == 0 ? 0 : 1;
    try {
      init_process_group(over_tcp(port, rank, 2, "gloo"))->barrier()->wait();
      std::ofstream(dir.path() + "/joined_" + std::to_string(process)) << "\n";
    } catch (const DistributedError& e) {
      EXPECT_TRUE(has(e.what(), "rank 1 is taken by another process (")) << e.what();
      std::ofstream(dir.path() + "/refused_" + std::to_string(process)) << "\n";
    }
  }, {60s});
  test::expect_all_ok(results);
  int refused = 0;
  for (int p = 1; p <= 2; ++p) {
    refused += std::ifstream(dir.path() + "/refused_" + std::to_string(p)).good();
  }
  EXPECT_EQ(refused, 1);
  EXPECT_TRUE(std::ifstream(dir.path() + "/joined_0").good());
}

}  // namespace
}  // namespace dpx
