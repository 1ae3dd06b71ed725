// A store host whose name resolves to several addresses, the first of them a black hole
// (Note [Several addresses] in src/store/connect.cpp), on two network-namespace hosts: host a serves,
// host b connects through a name its own /etc/hosts gives two addresses.
#include <netdb.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <fstream>

#include "dpx/dpx.h"
#include "support/expect_throws.h"
#include "support/harness.h"
#include "support/launcher_harness.h"
#include "support/netns_hosts.h"

namespace dpx {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kBlackHole = "10.213.0.3";

// Gives this process (a child) its own /etc/hosts: each line of `lines` is "address name".
void own_etc_hosts(const std::string& dir, const std::string& lines) {
  ASSERT_EQ(::unshare(CLONE_NEWNS), 0) << strerror(errno);
  ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0) << strerror(errno);
  const std::string path = dir + "/hosts";
  std::ofstream(path) << lines;
  ASSERT_EQ(::mount(path.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr), 0) << strerror(errno);
}

// The first address `name` resolves to, as connect_to sees it.
std::string first_address(const std::string& name) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0) return "";
  char text[NI_MAXHOST] = {0};
  ::getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST);
  ::freeaddrinfo(found);
  return text;
}

TEST(StoreAddresses, ABlackHoledFirstAddressCostsAMomentAndIsNamedWhenAllFail) {
  if (auto why = test::TwoHosts::why_not(); !why.empty()) GTEST_SKIP() << why;
  test::TwoHosts hosts;
  ASSERT_TRUE(hosts.ok()) << "could not set up the network namespaces";
  ASSERT_TRUE(hosts.black_hole_on_b(kBlackHole));
  test::TempDir dir;
  int ports[2];
  ASSERT_EQ(::pipe(ports), 0);
  auto results = test::run_processes(2, [&](int rank) {
    if (rank == 0) {  // host a serves the store on its own address
      hosts.enter_a();
      TcpStoreOptions o;
      o.host = test::TwoHosts::kAddrA;
      o.is_server = true;
      o.timeout = 30s;
      auto server = Store::tcp(o);
      const int port = server->port();
      ASSERT_EQ(::write(ports[1], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
      server->wait({"done"});
      return;
    }
    hosts.enter_b();
    own_etc_hosts(dir.path(), std::string(kBlackHole) + " store-host\n" +
                                  test::TwoHosts::kAddrA + " store-host\n" + kBlackHole +
                                  " dead-host\n");
    ASSERT_EQ(first_address("store-host"), kBlackHole) << "the resolver put the working "
                                                          "address first; the test needs the "
                                                          "black hole first";
    int port = 0;
    ASSERT_EQ(::read(ports[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
    TcpStoreOptions o;
    o.host = "store-host";
    o.port = static_cast<std::uint16_t>(port);
    o.timeout = 10s;
    auto start = Clock::now();
    auto store = Store::tcp(o);
    store->set("k", "v");
    EXPECT_LT(test::seconds_since(start), 2.0);  // not the 10 s deadline
    // A name with only the black hole: the error says which address did not answer.
    o.host = "dead-host";
    o.timeout = 1500ms;
    start = Clock::now();
    auto msg = test::expect_throws<TimeoutError>([&] { Store::tcp(o); });
    EXPECT_NE(msg.find(std::string(kBlackHole) + ":" + std::to_string(port) +
                       ": no answer to the connection request"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("handshake"), std::string::npos) << msg;
    EXPECT_LT(test::seconds_since(start), 5.0);
    store->set("done", "1");
  }, {60s});
  ::close(ports[0]);
  ::close(ports[1]);
  test::expect_all_ok(results);
}

}  // namespace
}  // namespace dpx
