// dpxrun with several nodes: two agents on this machine (static and c10d rendezvous, elastic
// membership), and two network namespaces joined by a veth pair standing in for two hosts.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>

#include "support/launcher_harness.h"
#include "support/netns_hosts.h"

namespace dpx::test {
namespace {

using std::chrono::seconds;
using Env = std::map<std::string, std::string>;

std::vector<std::string> c10d(const std::string& endpoint, const std::string& nnodes,
                              std::vector<std::string> more = {}) {
  std::vector<std::string> f = {"--nnodes", nnodes, "--nproc-per-node", "2", "--rdzv-backend",
                                "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "job7",
                                "--monitor-interval", "0.05", "--stop-grace", "2",
                                "--rdzv-conf", "join_timeout=30,last_call_timeout=1,close_timeout=10"};
  f.insert(f.end(), more.begin(), more.end());
  return f;
}

// Waits until `n` workers of the first attempt are inside their all-reduce loop.
bool all_reducing(const std::string& dir, int n, std::chrono::seconds timeout) {
  return wait_until([&] {
    int found = 0;
    for (int r = 0; r < n; ++r) {
      found += path_exists(dir + "/running_" + std::to_string(r) + "_0") ? 1 : 0;
    }
    return found == n;
  }, timeout);
}

// Ranks are contiguous per node and everyone agrees on the master and the world.
void expect_two_node_layout(std::vector<Env> envs, const std::string& use_agent_store) {
  ASSERT_EQ(envs.size(), 4u);
  std::set<std::string> ranks, masters;
  for (auto& e : envs) {
    const int rank = std::stoi(e["RANK"]), group = std::stoi(e["GROUP_RANK"]);
    ranks.insert(e["RANK"]);
    masters.insert(e["MASTER_ADDR"] + ":" + e["MASTER_PORT"]);
    EXPECT_EQ(rank, 2 * group + std::stoi(e["LOCAL_RANK"]));
    EXPECT_EQ(e["WORLD_SIZE"], "4");
    EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(e["GROUP_WORLD_SIZE"], "2");
    EXPECT_EQ(e["ROLE_RANK"], e["RANK"]);
    EXPECT_EQ(e["ROLE_WORLD_SIZE"], "4");
    EXPECT_EQ(e["TORCHELASTIC_USE_AGENT_STORE"], use_agent_store);
    EXPECT_EQ(e["TORCHELASTIC_RESTART_COUNT"], "0");
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(masters.size(), 1u);
}

TEST(LauncherMultiNode, TwoAgentsWithC10dRendezvous) {
  TempDir dir;
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_tcp_port());
  Launch a(dpxrun_cmd(c10d(endpoint, "2"), {"env", dir.path()}));
  Launch b(dpxrun_cmd(c10d(endpoint, "2"), {"env", dir.path()}));
  auto ra = a.wait(seconds(60)), rb = b.wait(seconds(60));
  ASSERT_EQ(ra.exit_code, 0) << ra.output << "\n--- other agent:\n" << rb.output;
  ASSERT_EQ(rb.exit_code, 0) << rb.output << "\n--- other agent:\n" << ra.output;
  auto envs = read_worker_envs(dir.path());
  expect_two_node_layout(envs, "False");
  for (auto& e : envs) EXPECT_EQ(e["TORCHELASTIC_RUN_ID"], "job7");
}

TEST(LauncherMultiNode, TwoAgentsWithStaticRendezvous) {
  TempDir dir;
  const std::string port = std::to_string(free_tcp_port());
  auto flags = [&](const char* node) {
    return std::vector<std::string>{"--nnodes", "2", "--node_rank", node, "--nproc-per-node",
                                    "2", "--master-port", port, "--monitor-interval", "0.05"};
  };
  Launch b(dpxrun_cmd(flags("1"), {"env", dir.path()}));  // the client may start first
  Launch a(dpxrun_cmd(flags("0"), {"env", dir.path()}));
  auto ra = a.wait(seconds(60)), rb = b.wait(seconds(60));
  ASSERT_EQ(ra.exit_code, 0) << ra.output << "\n--- other agent:\n" << rb.output;
  ASSERT_EQ(rb.exit_code, 0) << rb.output << "\n--- other agent:\n" << ra.output;
  auto envs = read_worker_envs(dir.path());
  expect_two_node_layout(envs, "True");
  for (auto& e : envs) {
    EXPECT_EQ(e["MASTER_PORT"], port);
    EXPECT_EQ(e["MASTER_ADDR"], "127.0.0.1");
  }
}

TEST(LauncherMultiNode, FailureOnOneNodeRestartsEveryNodeOnce) {
  TempDir dir;
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_tcp_port());
  auto flags = c10d(endpoint, "2", {"--max-restarts", "3"});
  Launch a(dpxrun_cmd(flags, {"fail-until", "1", dir.path()}));
  Launch b(dpxrun_cmd(flags, {"fail-until", "1", dir.path()}));
  auto ra = a.wait(seconds(60)), rb = b.wait(seconds(60));
  ASSERT_EQ(ra.exit_code, 0) << ra.output << "\n--- other agent:\n" << rb.output;
  ASSERT_EQ(rb.exit_code, 0) << rb.output << "\n--- other agent:\n" << ra.output;
  std::vector<Env> second;
  for (auto& e : read_worker_envs(dir.path())) {
    if (e["TORCHELASTIC_RESTART_COUNT"] != "0") second.push_back(e);
  }
  // One failure, one restart for the whole job: no attempt 2, every node's workers in attempt 1.
  ASSERT_EQ(second.size(), 4u) << ra.output << rb.output;
  for (auto& e : second) e["TORCHELASTIC_RESTART_COUNT"] = "0";  // compare the rest as usual
  expect_two_node_layout(second, "False");
  EXPECT_NE((ra.output + rb.output).find("another node restarts the group"), std::string::npos)
      << ra.output << rb.output;
}

TEST(LauncherMultiNode, LateSecondAgentGrowsTheWorldWithoutUsingARestart) {
  TempDir dir;
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_tcp_port());
  Launch a(dpxrun_cmd(c10d(endpoint, "1:2"), {"wait-world", "4", dir.path()}));
  ASSERT_TRUE(wait_until([&] { return read_worker_envs(dir.path()).size() == 2; }, seconds(30)))
      << a.output_so_far();
  Launch b(dpxrun_cmd(c10d(endpoint, "1:2"), {"wait-world", "4", dir.path()}));
  auto ra = a.wait(seconds(60)), rb = b.wait(seconds(60));
  ASSERT_EQ(ra.exit_code, 0) << ra.output << "\n--- other agent:\n" << rb.output;
  ASSERT_EQ(rb.exit_code, 0) << rb.output << "\n--- other agent:\n" << ra.output;
  std::vector<Env> grown;
  for (auto& e : read_worker_envs(dir.path())) {
    EXPECT_EQ(e["TORCHELASTIC_RESTART_COUNT"], "0") << "membership changes are not restarts";
    if (e["WORLD_SIZE"] == "4") grown.push_back(e);
  }
  expect_two_node_layout(grown, "False");
  EXPECT_NE(ra.output.find("a new node is waiting to join"), std::string::npos) << ra.output;
}

TEST(LauncherMultiNode, TwoByTwoAllreduceOverGloo) {
  TempDir dir;
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_tcp_port());
  Launch a(dpxrun_cmd(c10d(endpoint, "2"), {"allreduce", dir.path()}));
  Launch b(dpxrun_cmd(c10d(endpoint, "2"), {"allreduce", dir.path()}));
  auto ra = a.wait(seconds(60)), rb = b.wait(seconds(60));
  ASSERT_EQ(ra.exit_code, 0) << ra.output << "\n--- other agent:\n" << rb.output;
  ASSERT_EQ(rb.exit_code, 0) << rb.output << "\n--- other agent:\n" << ra.output;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(read_file(dir.path() + "/sum_" + std::to_string(r)), "10 4\n") << r;
  }
}

TEST(LauncherMultiNode, KilledAgentIsDroppedAndTheSurvivorCarriesOn) {
  TempDir dir;
  const int port = free_tcp_port();
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  auto flags = c10d(endpoint, "1:2", {"--max-restarts", "1"});
  Launch a(dpxrun_cmd(flags, {"allreduce", dir.path(), "30"}));
  // The survivor must be the agent serving the store (its loss ends every agent).
  ASSERT_TRUE(wait_until([&] { return port_listening(port); }, seconds(30))) << a.output_so_far();
  Launch b(dpxrun_cmd(flags, {"allreduce", dir.path(), "30"}));
  ASSERT_TRUE(all_reducing(dir.path(), 4, seconds(30))) << a.output_so_far();
  kill(b.pid(), SIGKILL);
  auto ra = a.wait(seconds(60));
  b.wait(seconds(5));
  ASSERT_EQ(ra.exit_code, 0) << ra.output;
  EXPECT_EQ(read_file(dir.path() + "/sum_0"), "3 2\n") << ra.output;
  EXPECT_EQ(read_file(dir.path() + "/sum_1"), "3 2\n");
}

TEST(LauncherNetns, TwoHostsAllreduceThenLinkCutEndsInAClearError) {
  if (auto why = TwoHosts::why_not(); !why.empty()) GTEST_SKIP() << why;
  TwoHosts hosts;
  ASSERT_TRUE(hosts.ok()) << "could not set up the network namespaces";
  const std::string endpoint = "10.213.0.1:29400";  // namespaces have their own port space
  {
    TempDir dir;
    Launch a(dpxrun_cmd(c10d(endpoint, "2"), {"allreduce", dir.path()}, hosts.exec_a()), hosts.env_a());
    Launch b(dpxrun_cmd(c10d(endpoint, "2"), {"allreduce", dir.path()}, hosts.exec_b()), hosts.env_b());
    auto ra = a.wait(seconds(60)), rb = b.wait(seconds(60));
    ASSERT_EQ(ra.exit_code, 0) << ra.output;
    ASSERT_EQ(rb.exit_code, 0) << rb.output;
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(read_file(dir.path() + "/sum_" + std::to_string(r)), "10 4\n") << r;
    }
  }
  TempDir dir;
  Launch a(dpxrun_cmd(c10d(endpoint, "2"), {"allreduce", dir.path(), "60"}, hosts.exec_a()),
           hosts.env_a());
  Launch b(dpxrun_cmd(c10d(endpoint, "2"), {"allreduce", dir.path(), "60"}, hosts.exec_b()),
           hosts.env_b());
  ASSERT_TRUE(all_reducing(dir.path(), 4, seconds(30))) << a.output_so_far() << b.output_so_far();
  ASSERT_TRUE(hosts.cut());
  auto ra = a.wait(seconds(60)), rb = b.wait(seconds(60));
  EXPECT_FALSE(ra.timed_out) << ra.output;
  EXPECT_FALSE(rb.timed_out) << rb.output;
  EXPECT_EQ(ra.exit_code, 1) << ra.output;
  EXPECT_EQ(rb.exit_code, 1) << rb.output;
  EXPECT_NE(ra.output.find("FAILED"), std::string::npos) << ra.output;
  EXPECT_NE(rb.output.find("lost contact with the rendezvous store"), std::string::npos)
      << rb.output;
  if (std::getenv("DPX_TEST_VERBOSE")) std::printf("%s\n---\n%s\n", ra.output.c_str(), rb.output.c_str());
}

TEST(LauncherNetns, KilledHostIsDroppedAndTheSurvivorCarriesOn) {
  if (auto why = TwoHosts::why_not(); !why.empty()) GTEST_SKIP() << why;
  TwoHosts hosts;
  ASSERT_TRUE(hosts.ok()) << "could not set up the network namespaces";
  TempDir dir;
  const std::string endpoint = "10.213.0.1:29400";
  auto flags = c10d(endpoint, "1:2", {"--max-restarts", "1"});
  Launch a(dpxrun_cmd(flags, {"allreduce", dir.path(), "30"}, hosts.exec_a()), hosts.env_a());
  Launch b(dpxrun_cmd(flags, {"allreduce", dir.path(), "30"}, hosts.exec_b()), hosts.env_b());
  ASSERT_TRUE(all_reducing(dir.path(), 4, seconds(30))) << a.output_so_far() << b.output_so_far();
  kill(b.pid(), SIGKILL);
  auto ra = a.wait(seconds(60));
  ASSERT_EQ(ra.exit_code, 0) << ra.output;
  EXPECT_EQ(read_file(dir.path() + "/sum_0"), "3 2\n") << ra.output;
}

}  // namespace
}  // namespace dpx::test
