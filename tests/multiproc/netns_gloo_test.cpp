// Two hosts (network namespaces) whose names resolve to loopback, as in the field: with no
// network variable set, gloo must listen where the master is reached
// (Note [Listen where the master is reached]), train exactly as one host does, and end cleanly
// when a host is lost.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "net/route.h"
#include "support/launcher_harness.h"
#include "support/netns_hosts.h"

namespace dpx::test {
namespace {

using std::chrono::seconds;

std::vector<std::string> two_nodes(int port) {
  return {"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
          std::string(TwoHosts::kAddrA) + ":" + std::to_string(port), "--rdzv-id", "netns",
          "--monitor-interval", "0.05", "--stop-grace", "2",
          "--rdzv-conf", "join_timeout=30,last_call_timeout=1,close_timeout=10"};
}

// Nothing that names an interface or a host reaches the workers from this test's environment.
LaunchOptions no_network_variables() {
  LaunchOptions o;
  o.unset_env.insert(o.unset_env.end(), {"GLOO_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT"});
  return o;
}

TEST(NetnsGloo, TwoHostsTrainWithoutInterfaceVariableAsOneHostDoes) {
  if (auto why = TwoHosts::why_not(); !why.empty()) GTEST_SKIP() << why;
  TempDir one, two;
  auto single = run_launcher(dpxrun_cmd({"--standalone", "--nproc-per-node", "2"},
                                    {"train", one.path()}),
                             seconds(120), no_network_variables());
  ASSERT_EQ(single.exit_code, 0) << single.output;
  TwoHosts hosts;
  ASSERT_TRUE(hosts.ok()) << "could not set up the network namespaces";
  Launch a(dpxrun_cmd(two_nodes(29400), {"train", two.path()}, hosts.exec_a()),
           no_network_variables());
  Launch b(dpxrun_cmd(two_nodes(29400), {"train", two.path()}, hosts.exec_b()),
           no_network_variables());
  auto ra = a.wait(seconds(120)), rb = b.wait(seconds(120));
  ASSERT_EQ(ra.exit_code, 0) << ra.output << "\n--- host b:\n" << rb.output;
  ASSERT_EQ(rb.exit_code, 0) << rb.output << "\n--- host a:\n" << ra.output;
  const std::string expected = read_file(one.path() + "/params");
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(read_file(two.path() + "/params"), expected);
}

TEST(NetnsGloo, LosingAHostEndsTheOtherWithPeerLostError) {
  if (auto why = TwoHosts::why_not(); !why.empty()) GTEST_SKIP() << why;
  TwoHosts hosts;
  ASSERT_TRUE(hosts.ok()) << "could not set up the network namespaces";
  TempDir dir;
  // Host a serves the rendezvous store; host b's agent and workers die at once.
  Launch a(dpxrun_cmd(two_nodes(29400), {"allreduce", dir.path(), "60"}, hosts.exec_a()),
           no_network_variables());
  Launch b(dpxrun_cmd(two_nodes(29400), {"allreduce", dir.path(), "60"}, hosts.exec_b()),
           no_network_variables());
  ASSERT_TRUE(wait_until([&] { return std::ifstream(dir.path() + "/running_1_0").good() &&
                                      std::ifstream(dir.path() + "/running_0_0").good(); },
                         seconds(60)))
      << a.output_so_far() << "\n--- host b:\n" << b.output_so_far();
  kill(b.pid(), SIGKILL);  // the agent; its workers follow through PR_SET_PDEATHSIG
  auto ra = a.wait(seconds(60));
  EXPECT_FALSE(ra.timed_out) << ra.output;
  EXPECT_EQ(ra.exit_code, 1) << ra.output;
  EXPECT_NE(ra.output.find("PeerLostError"), std::string::npos) << ra.output;
}

// This host's name resolves to loopback (as /etc/hosts often has it): a rank told the job spans
// two hosts, with that name as MASTER_ADDR, must fail at once rather than listen on loopback.
TEST(NetnsGloo, ListeningOnLoopbackInAJobOverSeveralHostsFailsAtOnce) {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  const auto route = detail::local_address_toward(host);
  if (!route || !detail::is_loopback_address(*route)) {
    GTEST_SKIP() << "this host's name (" << host << ") does not resolve to loopback here";
  }
  TempDir dir;
  LaunchOptions o = no_network_variables();
  o.set_env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "1"},
               {"MASTER_ADDR", host}, {"MASTER_PORT", std::to_string(free_tcp_port())}};
  o.unset_env = {"GLOO_SOCKET_IFNAME"};
  auto r = run_launcher({test_worker_path(), "train", dir.path()}, seconds(30), o);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gloo would listen on " + *route + ", a loopback address, because "
                          "MASTER_ADDR '" + host + "' leads to this host's loopback; but the job "
                          "spans several hosts (WORLD_SIZE 2, LOCAL_WORLD_SIZE 1)"),
            std::string::npos) << r.output;
}

TEST(NetnsGloo, CheckFromBothHostsNamesTheAddressEachListensOn) {
  if (auto why = TwoHosts::why_not(); !why.empty()) GTEST_SKIP() << why;
  TwoHosts hosts;
  ASSERT_TRUE(hosts.ok()) << "could not set up the network namespaces";
  auto flags = two_nodes(29400);
  flags.insert(flags.begin(), "--check");
  Launch a(dpxrun_cmd(flags, {}, hosts.exec_a()), no_network_variables());
  Launch b(dpxrun_cmd(flags, {}, hosts.exec_b()), no_network_variables());
  auto ra = a.wait(seconds(120)), rb = b.wait(seconds(120));
  ASSERT_EQ(ra.exit_code, 0) << ra.output << "\n--- host b:\n" << rb.output;
  ASSERT_EQ(rb.exit_code, 0) << rb.output << "\n--- host a:\n" << ra.output;
  const std::string both = ra.output + rb.output;
  EXPECT_NE(both.find("gloo listens on 10.213.0.1 (dva"), std::string::npos) << both;
  EXPECT_NE(both.find("gloo listens on 10.213.0.2 (dvb"), std::string::npos) << both;
  EXPECT_NE(both.find("rank 0: gloo: all 2 ranks reach each other"), std::string::npos) << both;
  EXPECT_NE(ra.output.find("dpxrun --check: this node found no problem"), std::string::npos);
  EXPECT_NE(rb.output.find("dpxrun --check: this node found no problem"), std::string::npos);
}

}  // namespace
}  // namespace dpx::test
