// dpx's TCP store against hostile or mistaken peers (Note [Hostile clients] and [Job token] in
// src/store/tcp_server.h): a foreign program on the store's port, clients that send half a
// request, announce 2 GiB, send garbage, say nothing, or present another job's token.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include <torch/torch.h>

#include "store/tcp_protocol.h"
#include "dpx/dpx.h"
#include "support/expect_throws.h"
#include "support/harness.h"
#include "support/launcher_harness.h"
#include "support/raw_socket.h"

namespace dpx {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace proto = detail::store_protocol;
using test::closed_by_server;
using test::foreign_listener;
using test::raw_client;
using test::Socket;
using test::store_client;

sockaddr_in loopback(int port, const char* ip = "127.0.0.1") {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

std::string hello(const std::string& token) { return test::dpx_hello(token); }

std::shared_ptr<Store> server_store(const std::string& token = "",
                                    std::chrono::milliseconds client_deadline = 1s) {
  TcpStoreOptions o;
  o.is_server = true;
  o.token = token;
  o.client_deadline = client_deadline;
  o.timeout = 10s;
  return Store::tcp(o);
}

TEST(StoreFaults, MasterPortHeldByAnotherProgram) {
  int port = 0;
  Socket listener = foreign_listener(port);
  const std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  // Each rank in a child: an abort (as c10d's client gave) fails the test instead of the run.
  auto results = test::run_processes(2, [&](int rank) {
    InitOptions o;
    o.init_method = url + "?rank=" + std::to_string(rank) + "&world_size=2";
    o.timeout = 3000ms;
    const auto start = Clock::now();
    if (rank == 0) {
      auto msg = test::expect_throws<DistributedError>([&] { init_process_group(o); });
      EXPECT_NE(msg.find("already in use"), std::string::npos) << msg;
      EXPECT_LT(test::seconds_since(start), 3.0);
      return;
    }
    auto msg = test::expect_throws<TimeoutError>([&] { init_process_group(o); });
    EXPECT_NE(msg.find("did not answer dpx's store handshake"), std::string::npos) << msg;
    EXPECT_GE(test::seconds_since(start), 2.9);
    EXPECT_LT(test::seconds_since(start), 15.0);  // the 3 s timeout, loosely
  }, {60s});
  test::expect_all_ok(results);
}

TEST(StoreFaults, AForeignListenerThatClosesIsAnErrorNotAnAbort) {
  int port = 0;
  Socket listener = foreign_listener(port);
  std::thread closer([&] {
    const int c = ::accept(listener.fd, nullptr, nullptr);
    ::close(c);
  });
  test::run_in_child([&] {
    auto msg = test::expect_throws<DistributedError>([&] { store_client(port, "", 5s); });
    EXPECT_NE(msg.find("not a dpx store"), std::string::npos) << msg;
  });
  closer.join();
}

TEST(StoreFaults, HalfARequestStallsNobodyAndIsCutOffAtTheDeadline) {
  auto server = server_store("", 1s);
  std::string half = hello("") + proto::Writer().u8(proto::kSet).str("k").str(std::string(100, 'v')).frame();
  half.resize(half.size() - 50);
  Socket hostile = raw_client(server->port(), half);
  const auto start = Clock::now();
  auto rank = store_client(server->port());
  rank->set("a", "1");
  EXPECT_EQ(rank->get("a"), "1");
  EXPECT_EQ(rank->add("n", 2), 2);
  EXPECT_LT(test::seconds_since(start), 1.0);  // served while the hostile request is still open
  EXPECT_TRUE(closed_by_server(hostile.fd, 10s));
  EXPECT_GE(test::seconds_since(start), 0.9);
  EXPECT_FALSE(rank->check({"k"}));  // nothing of the half request was stored
}

TEST(StoreFaults, AnAnnounced2GiBValueIsRefusedAtOnceAndRanksCarryOn) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    if (rank == 0) {
      // Announce a 2 GiB frame, then disconnect; then announce it and stay.
      std::string head(4, '\0');
      const std::uint32_t n = 2u << 30;
      for (int i = 0; i < 4; ++i) head[i] = static_cast<char>((n >> (8 * i)) & 0xff);
      { Socket gone = raw_client(server.port(), hello("") + head); }
      Socket stays = raw_client(server.port(), hello("") + head);
      EXPECT_TRUE(closed_by_server(stays.fd, 5s));
    }
    auto pg = new_process_group("gloo", server.client(30s), rank, 2);
    auto t = at::full({4}, static_cast<float>(rank + 1));
    pg->allreduce(t)->wait();
    EXPECT_TRUE(t.equal(at::full({4}, 3.0f)));
  }, {60s});
  test::expect_all_ok(results);
}

TEST(StoreFaults, GarbageAndSilentClientsAreDropped) {
  auto server = server_store("", 1s);
  Socket http = raw_client(server->port(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  Socket bad_op = raw_client(server->port(), hello("") + proto::Writer().u8(200).frame());
  Socket silent = raw_client(server->port(), "");
  const auto start = Clock::now();
  EXPECT_TRUE(closed_by_server(http.fd, 5s));
  EXPECT_TRUE(closed_by_server(bad_op.fd, 5s));
  EXPECT_LT(test::seconds_since(start), 0.9);  // both at once, not at the deadline
  EXPECT_TRUE(closed_by_server(silent.fd, 10s));
  EXPECT_GE(test::seconds_since(start), 0.9);
  auto rank = store_client(server->port());
  rank->set("still", "here");
  EXPECT_EQ(rank->get("still"), "here");
}

TEST(StoreFaults, AValueOverTheFrameLimitIsAClearErrorAndTheClientCarriesOn) {
  auto server = server_store();
  auto rank = store_client(server->port());
  auto msg = test::expect_throws<DistributedError>(
      [&] { rank->set("big", std::string((64u << 20) + 1, 'x')); });
  EXPECT_NE(msg.find("over the store's limit of 64 MiB"), std::string::npos) << msg;
  rank->set("small", "ok");
  EXPECT_EQ(server->get("small"), "ok");
}

TEST(StoreFaults, AClientWithoutTheJobTokenIsRefused) {
  auto server = server_store("s3cret");
  auto msg = test::expect_throws<DistributedError>([&] { store_client(server->port(), "other"); });
  EXPECT_NE(msg.find("job token does not match"), std::string::npos) << msg;
  test::expect_throws<DistributedError>([&] { store_client(server->port(), ""); });
  store_client(server->port(), "s3cret")->set("k", "v");
  EXPECT_EQ(server->get("k"), "v");

  // Through init_process_group: ?token= on a tcp:// URL.
  const std::string port = std::to_string(test::free_tcp_port());
  auto results = test::run_processes(2, [&](int rank) {
    InitOptions o;
    o.timeout = 20s;
    const std::string url =
        "tcp://127.0.0.1:" + port + "?world_size=2&rank=" + std::to_string(rank) + "&token=";
    if (rank == 1) {
      o.init_method = url + "wrong";
      auto msg = test::expect_throws<DistributedError>([&] { init_process_group(o); });
      EXPECT_NE(msg.find("job token does not match"), std::string::npos) << msg;
    }
    o.init_method = url + "t";
    init_process_group(o)->barrier()->wait();
  }, {60s});
  test::expect_all_ok(results);
}

// This machine's own name, which /etc/hosts maps to a loopback address, is how the other hosts
// name it; the store must not hide on loopback then (Note [Listening on a name]).
TEST(StoreFaults, AHostNameThatResolvesToLoopbackHereIsServedOnEveryInterface) {
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof(name) - 1), 0);
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  if (::getaddrinfo(name, nullptr, &hints, &found) != 0) {
    GTEST_SKIP() << "SKIPPED: " << name << " does not resolve";
  }
  const bool on_loopback =
      (ntohl(reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr.s_addr) >> 24) == 127;
  ::freeaddrinfo(found);
  if (!on_loopback) GTEST_SKIP() << "SKIPPED: " << name << " does not resolve to loopback here";
  TcpStoreOptions o;
  o.host = name;
  o.is_server = true;
  auto server = Store::tcp(o);
  // Listening on every interface holds the port on 127.0.0.2 too.
  Socket other(::socket(AF_INET, SOCK_STREAM, 0));
  auto a = loopback(server->port(), "127.0.0.2");
  EXPECT_NE(::bind(other.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  store_client(server->port())->set("k", "v");
  EXPECT_EQ(server->get("k"), "v");
}

TEST(StoreFaults, TheServerListensOnlyOnTheAddressItWasGiven) {
  auto server = server_store();  // 127.0.0.1
  // Had it bound every interface (c10d's TCPStore does), this bind would fail with EADDRINUSE.
  Socket other(::socket(AF_INET, SOCK_STREAM, 0));
  auto a = loopback(server->port(), "127.0.0.2");
  EXPECT_EQ(::bind(other.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  Socket v6(::socket(AF_INET6, SOCK_STREAM, 0));
  if (v6.fd >= 0) {
    sockaddr_in6 b{};
    b.sin6_family = AF_INET6;
    b.sin6_port = htons(server->port());
    b.sin6_addr = in6addr_loopback;
    EXPECT_NE(::connect(v6.fd, reinterpret_cast<sockaddr*>(&b), sizeof(b)), 0);
  }
}

}  // namespace
}  // namespace dpx
