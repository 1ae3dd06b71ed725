// dpx::spawn: the in-program launcher (torch.multiprocessing.spawn for dpx).
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/launcher_harness.h"

namespace dpx::test {
namespace {

TEST(Spawn, EveryRankRunsWithTheLauncherEnvironmentAndAllReduces) {
  TempDir dir;
  const std::string d = dir.path();
  spawn(3, [d](int rank, int world) {
    TORCH_CHECK(world == 3, "world ", world);
    TORCH_CHECK(std::getenv("RANK") == std::to_string(rank), "RANK");
    TORCH_CHECK(std::string(std::getenv("WORLD_SIZE")) == "3", "WORLD_SIZE");
    TORCH_CHECK(std::string(std::getenv("LOCAL_RANK")) == std::to_string(rank), "LOCAL_RANK");
    InitOptions o;
    o.backend = "gloo";
    o.timeout = std::chrono::seconds(20);
    auto pg = init_process_group(o);
    auto t = torch::full({2}, static_cast<float>(rank + 1));
    pg->allreduce(t)->wait();
    std::ofstream(d + "/rank" + std::to_string(rank)) << t[0].item<float>();
  });
  for (int r = 0; r < 3; ++r) {
    std::ifstream in(d + "/rank" + std::to_string(r));
    float v = 0;
    ASSERT_TRUE(in >> v) << "rank " << r << " did not run";
    EXPECT_EQ(v, 6.0f);
  }
}

TEST(Spawn, OneRankThrowingStopsTheOthersAndTheParentSeesItsMessage) {
  TempDir dir;
  const std::string d = dir.path();
  SpawnOptions o;
  o.stop_grace = std::chrono::seconds(2);
  try {
    spawn(3, [d](int rank, int) {
      if (rank == 1) throw std::runtime_error("rank one gives up");
      std::ofstream(d + "/pid" + std::to_string(rank)) << getpid();
      std::this_thread::sleep_for(std::chrono::seconds(60));
    }, o);
    FAIL() << "spawn returned although rank 1 threw";
  } catch (const ProcessFailedError& e) {
    EXPECT_EQ(e.rank, 1);
    EXPECT_EQ(e.exit_code, 1);
    EXPECT_NE(std::string(e.what()).find("process 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("std::runtime_error: rank one gives up"),
              std::string::npos) << e.what();
  }
  for (int r : {0, 2}) {
    std::ifstream in(d + "/pid" + std::to_string(r));
    pid_t p = 0;
    if (in >> p) EXPECT_FALSE(process_exists(p)) << "rank " << r << " survived";
  }
}

TEST(Spawn, CrashIsReportedWithItsSignal) {
  try {
    spawn(2, [](int rank, int) {
      if (rank == 0) raise(SIGKILL);
    });
    FAIL() << "spawn returned although rank 0 was killed";
  } catch (const ProcessFailedError& e) {
    EXPECT_EQ(e.rank, 0);
    EXPECT_EQ(e.signal, SIGKILL);
    EXPECT_NE(std::string(e.what()).find("was killed by signal SIGKILL"), std::string::npos)
        << e.what();
  }
}

TEST(Spawn, BadArgumentsAreCallerErrors) {
  EXPECT_THROW(spawn(0, [](int, int) {}), c10::Error);
}

}  // namespace
}  // namespace dpx::test
