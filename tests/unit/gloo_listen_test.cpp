// Which address gloo listens on (Note [Listen where the master is reached]) and the routing
// helpers behind it.
#include <stdlib.h>
#include <unistd.h>

#include <climits>

#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include "comm/backends/gloo/gloo_device.h"
#include "net/route.h"
#include "dpx/store/store.h"
#include "support/expect_throws.h"

namespace dpx::detail {
namespace {

using ::testing::HasSubstr;
using Kind = GlooListen::Kind;

TEST(Route, LoopbackAddressesAndNames) {
  EXPECT_TRUE(is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(is_loopback_address("127.0.1.1"));
  EXPECT_TRUE(is_loopback_address("::1"));
  EXPECT_TRUE(is_loopback_address("::ffff:127.0.0.5"));
  EXPECT_FALSE(is_loopback_address("10.0.0.1"));
  EXPECT_FALSE(is_loopback_address("fd00::2"));
  EXPECT_FALSE(is_loopback_address("localhost"));  // numeric only
  EXPECT_TRUE(names_loopback("localhost"));
  EXPECT_TRUE(names_loopback("127.0.0.1"));
  EXPECT_FALSE(names_loopback("node1"));
}

TEST(Route, TheRouteToLoopbackIsLoopbackAndHasTheLoInterface) {
  EXPECT_EQ(local_address_toward("127.0.0.1"), std::optional<std::string>("127.0.0.1"));
  EXPECT_TRUE(is_loopback_address(local_address_toward("127.0.0.7").value_or("")));
  EXPECT_EQ(interface_of("127.0.0.1"), "lo");
  EXPECT_EQ(interface_of("192.0.2.200"), "");  // TEST-NET-1, held by no interface here
  EXPECT_EQ(local_address_toward("no-such-host.invalid"), std::nullopt);
}

GlooListenInputs inputs(std::string master, std::optional<std::string> route, int world,
                        int local) {
  GlooListenInputs in;
  in.master = std::move(master);
  in.route = std::move(route);
  in.world_size = world;
  in.local_world_size = local;
  return in;
}

TEST(GlooListen, InterfaceVariableWins) {
  auto in = inputs("node1", "127.0.1.1", 4, 2);
  in.ifname = "eth1";
  const auto l = choose_gloo_listen(in, "");
  EXPECT_EQ(l.kind, Kind::kInterface);
  EXPECT_EQ(l.value, "eth1");
  EXPECT_EQ(l.describe(), "interface eth1 (GLOO_SOCKET_IFNAME)");
}

TEST(GlooListen, TheAddressThatReachesTheMaster) {
  const auto l = choose_gloo_listen(inputs("10.213.0.1", "10.213.0.2", 2, 1), "");
  EXPECT_EQ(l.kind, Kind::kAddress);
  EXPECT_EQ(l.value, "10.213.0.2");
  EXPECT_EQ(l.reason, "the route to MASTER_ADDR 10.213.0.1");
}

TEST(GlooListen, LoopbackIsFineOnOneHost) {
  // A loopback master, or a name that leads to loopback in a job on one host.
  EXPECT_EQ(choose_gloo_listen(inputs("127.0.0.1", "127.0.0.1", 4, 2), "").value, "127.0.0.1");
  EXPECT_EQ(choose_gloo_listen(inputs("node1", "127.0.1.1", 2, 2), "").value, "127.0.1.1");
  EXPECT_EQ(choose_gloo_listen(inputs("node1", "127.0.1.1", 2, 0), "").value, "127.0.1.1");
}

TEST(GlooListen, LoopbackInAJobOverSeveralHostsFailsAtOnce) {
  const std::string msg = dpx::test::expect_throws<c10::Error>(
      [] { choose_gloo_listen(inputs("node1", "127.0.1.1", 4, 2), "[rank 0/4 node1:7] "); });
  EXPECT_THAT(msg, HasSubstr("[rank 0/4 node1:7] gloo would listen on 127.0.1.1, a loopback "
                             "address, because MASTER_ADDR 'node1' leads to this host's "
                             "loopback; but the job spans several hosts (WORLD_SIZE 4, "
                             "LOCAL_WORLD_SIZE 2)"));
  EXPECT_THAT(msg, HasSubstr("or GLOO_SOCKET_IFNAME to the interface to use"));
}

TEST(GlooListen, NoMasterKnownMeansLoopback) {
  const auto l = choose_gloo_listen(inputs("", std::nullopt, 0, 0), "");
  EXPECT_EQ(l.kind, Kind::kAddress);
  EXPECT_EQ(l.value, "127.0.0.1");
}

TEST(GlooListen, InputsTakeTheTcpStoresHost) {
  for (const char* v : {"GLOO_SOCKET_IFNAME", "MASTER_ADDR", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}) {
    ::unsetenv(v);
  }
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.is_server = true;
  auto store = Store::prefix("group", Store::tcp(o));
  auto in = gloo_listen_inputs(store.get());
  EXPECT_EQ(in.master, "127.0.0.1");
  EXPECT_STREQ(in.master_source, "the store's host");
  EXPECT_EQ(in.route, std::optional<std::string>("127.0.0.1"));
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  EXPECT_STREQ(gloo_listen_inputs(store.get()).master_source, "MASTER_ADDR");
  ::unsetenv("MASTER_ADDR");
  EXPECT_EQ(gloo_listen_inputs(nullptr).master, "");
}

}  // namespace
}  // namespace dpx::detail
