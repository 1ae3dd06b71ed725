// Set-up of the shm backend's segment under hostile conditions: rank 0 killed inside the set-up
// window, a /dev/shm far smaller than the group (as in a default Docker container), memory that
// cannot be reserved (Note [No name] in src/comm/backends/shm/segment.h).
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx::shm_setup_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test::with_timeout;

// Entries of /dev/shm whose name mentions process `pid` (the names the old design used were
// "dpx-<pid>-<token>").
int dev_shm_entries_of(int pid) {
  int n = 0;
  const std::string needle = "-" + std::to_string(pid) + "-";
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) n += std::string(e->d_name).find(needle) != std::string::npos;
    ::closedir(d);
  }
  return n;
}

// Enters a private mount namespace with a 1 MiB tmpfs on /dev/shm; "" on success, else why not.
std::string tiny_dev_shm() {
  if (::unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS): ") + strerror(errno);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return std::string("making / private: ") + strerror(errno);
  }
  if (::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
    return std::string("mounting a tmpfs on /dev/shm: ") + strerror(errno);
  }
  return "";
}

// Whether this process may make a private mount namespace (root, or CAP_SYS_ADMIN).
std::string why_no_private_mounts() {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string why = tiny_dev_shm();
    (void)!::write(fds[1], why.data(), why.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  char buf[256];
  const ssize_t n = ::read(fds[0], buf, sizeof(buf));
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

TEST(ShmSetup, Rank0KilledInsideTheSetupWindowLeavesNothingBehind) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    test::StoreServer server;
    auto results = test::run_processes(2, [&](int rank) {
      auto store = server.client(20s);
      if (rank == 0) {
        store->set("pid0", std::to_string(::getpid()));
        new_process_group("shm", store, 0, 2, with_timeout(20s));  // killed while waiting
        ADD_FAILURE() << "rank 0 finished a set-up that rank 1 never joined";
        return;
      }
      // Rank 1 passes the set-up's members and settings checks as a rank with rank 0's world
      // size and settings would (Note [Members], Note [Consistency]: each rank publishes them
      // under members/<group>/<rank> and settings/<group>/<rank>), then stays away from the
      // segment: rank 0 makes it and waits for rank 1 to open it.
      store->set("members/1/1", store->get("members/1/0"));
      store->set("settings/1/1", store->get("settings/1/0"));
      store->wait({"shm/1/name"});
      const int pid0 = std::stoi(store->get("pid0"));
      ASSERT_EQ(::kill(pid0, SIGKILL), 0);
      EXPECT_EQ(dev_shm_entries_of(pid0), 0);
      EXPECT_THROW(new_process_group("shm", store, 1, 2, with_timeout(2s)), DistributedError);
    }, {60s});
    EXPECT_EQ(results[0].signal, SIGKILL) << results[0].output;
    EXPECT_TRUE(results[1].ok()) << results[1].output;
  }
}

TEST(ShmSetup, ATinyDevShmDoesNotLimitTheGroup) {
  const std::string why = why_no_private_mounts();
  if (!why.empty()) GTEST_SKIP() << "SKIPPED: cannot mount a small /dev/shm here: " << why;
  test::run_in_child([] {
    ASSERT_EQ(tiny_dev_shm(), "");
    ::setenv("DPX_SHM_SLOT_BYTES", "2097152", 1);  // 2 ranks x 2 slots x 2 MiB: 8 x /dev/shm
    test::StoreServer server;
    auto results = test::run_processes(2, [&](int rank) {
      auto pg = new_process_group("shm", server.client(), rank, 2);
      auto t = at::full({1 << 20}, static_cast<float>(rank + 1));  // 4 MiB: every slot byte
      pg->allreduce(t)->wait();
      EXPECT_TRUE(t.equal(at::full({1 << 20}, 3.0f)));
    }, {60s});
    test::expect_all_ok(results);
  });
}

TEST(ShmSetup, MemoryThatCannotBeReservedFailsSetupOnEveryRankAtOnce) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    ::setenv("DPX_SHM_SLOT_BYTES", "4194304", 1);  // a 16 MiB segment
    if (rank == 0) {
      // The segment is a file of rank 0's: a 1 MiB file-size limit refuses it as a full memory
      // limit would.
      ::signal(SIGXFSZ, SIG_IGN);
      const rlimit limit{1 << 20, 1 << 20};
      ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
    }
    const auto start = Clock::now();
    try {
      new_process_group("shm", server.client(), rank, 2, with_timeout(60s));
      ADD_FAILURE() << "set-up succeeded";
    } catch (const DistributedError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
      EXPECT_NE(msg.find("DPX_BACKEND=gloo"), std::string::npos) << msg;
      if (rank == 1) EXPECT_NE(msg.find("rank 0 could not set the group up"), std::string::npos) << msg;
    }
    EXPECT_LT(Clock::now() - start, 20s);  // not the 60 s group timeout
  }, {60s});
  test::expect_all_ok(results);
}

}  // namespace
}  // namespace dpx::shm_setup_test
