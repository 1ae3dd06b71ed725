// dpx's TCP store when connections pile up (Note [Out of descriptors] in src/store/tcp_server.cpp)
// and when it also serves c10d's TCPStore clients (Note [c10d clients] in tcp_server.h), as
// dpxrun's static rendezvous store does.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/resource.h>
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
using test::closed_by_server;
using test::raw_client;
using test::Socket;
using test::store_client;

// LibTorch's own TCPStore client, as a PyTorch worker uses it.
std::shared_ptr<Store> c10d_client(int port) {
  TcpStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.c10d_protocol = true;
  o.timeout = 5s;
  return Store::tcp(o);
}

std::shared_ptr<Store> agent_store(const std::string& token) {
  TcpStoreOptions o;
  o.is_server = true;
  o.token = token;
  o.accept_c10d_clients = true;
  o.timeout = 5s;
  return Store::tcp(o);
}

int open_descriptors() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd) n += ::fcntl(fd, F_GETFD) != -1;
  return n;
}

// Runs a store server in a child that may open `spare` more descriptors than it has; fn(port)
// runs in a second child while it serves.
void with_limited_server(int spare, const std::function<void(int port)>& fn) {
  int ports[2], done[2];
  ASSERT_EQ(::pipe(ports), 0);
  ASSERT_EQ(::pipe(done), 0);
  auto results = test::run_processes(2, [&](int rank) {
    if (rank == 0) {
      ::close(ports[0]);
      ::close(done[1]);
      const auto nofile = static_cast<rlim_t>(open_descriptors() + spare);
      const rlimit limit{nofile, nofile};
      ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &limit), 0);
      auto server = agent_store("t");
      const int port = server->port();
      ASSERT_EQ(::write(ports[1], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
      char byte;
      (void)!::read(done[0], &byte, 1);  // until the other child is done
      return;
    }
    ::close(ports[1]);
    ::close(done[0]);
    int port = 0;
    ASSERT_EQ(::read(ports[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
    fn(port);
    const char byte = 1;
    ASSERT_EQ(::write(done[1], &byte, 1), 1);
  }, {60s});
  ::close(ports[0]);
  ::close(ports[1]);
  ::close(done[0]);
  ::close(done[1]);
  test::expect_all_ok(results);
}

TEST(StoreLimits, SilentConnectionsDoNotLockTheJobOutWhenDescriptorsRunOut) {
  with_limited_server(48, [](int port) {
    std::vector<Socket> flood;
    for (int i = 0; i < 200; ++i) flood.push_back(raw_client(port, ""));
    const auto start = Clock::now();
    auto rank = store_client(port, "t", 3s);  // shorter than the 10 s client deadline
    rank->set("k", "v");
    EXPECT_EQ(rank->get("k"), "v");
    EXPECT_LT(test::seconds_since(start), 1.5);
    // Those not pushed out already go at the hello deadline (2 s), not the client deadline.
    EXPECT_TRUE(closed_by_server(flood.back().fd, 5s));
    EXPECT_LT(test::seconds_since(start), 4.5);
  });
}

TEST(StoreLimits, AServerOutOfDescriptorsSaysSoToTheClientItCannotServe) {
  with_limited_server(16, [](int port) {
    std::vector<std::shared_ptr<Store>> held;
    std::string message;
    const auto start = Clock::now();
    for (int i = 0; i < 40 && message.empty(); ++i) {
      try {
        held.push_back(store_client(port, "t", 3s));
      } catch (const DistributedError& e) {
        message = e.what();
      }
    }
    EXPECT_NE(message.find("has run out of file descriptors (its limit, ulimit -n, is "),
              std::string::npos) << message;
    EXPECT_LT(test::seconds_since(start), 2.0);  // told at once, not at the timeout
    held.pop_back();
    held.pop_back();  // room again
    EXPECT_TRUE(test::wait_until([&] {
      try {
        held.push_back(store_client(port, "t", 1s));
        return true;
      } catch (const DistributedError&) {
        return false;
      }
    }, 10s));
  });
}

TEST(StoreLimits, MoreSilentConnectionsThanTheCapPushOutTheOldest) {
  TcpStoreOptions o;
  o.is_server = true;
  o.max_unidentified = 8;
  auto server = Store::tcp(o);
  std::vector<Socket> silent;
  for (int i = 0; i < 9; ++i) silent.push_back(raw_client(server->port(), ""));
  EXPECT_TRUE(closed_by_server(silent.front().fd, 1s));  // long before the hello deadline
  EXPECT_FALSE(closed_by_server(silent.back().fd, 200ms));
  store_client(server->port(), "", 5s)->set("k", "v");
  EXPECT_EQ(server->get("k"), "v");
}

// Step 4 of the note: a client descheduled between connect() and its hello, pushed out by
// newer silent connections, is told kBusy (its hello came too late) rather than just closed.
TEST(StoreLimits, AClientPushedOutBeforeItsHelloIsToldItMayComeBack) {
  TcpStoreOptions o;
  o.is_server = true;
  o.max_unidentified = 4;
  auto server = Store::tcp(o);
  Socket late = raw_client(server->port(), "");
  std::vector<Socket> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(raw_client(server->port(), ""));
  const std::string said = test::read_some(late.fd, 2s);  // pushed out: told before the close
  ASSERT_GE(said.size(), 5u) << "closed without a word";
  EXPECT_EQ(static_cast<std::uint8_t>(said[4]), detail::store_protocol::kBusy);
  EXPECT_NE(said.find("connect again"), std::string::npos) << said.substr(5);
}

// ... and dpx's client, told kBusy, connects again (here a stand-in server answers the first
// hello kBusy and the second kOk).
TEST(StoreLimits, AClientToldBusyConnectsAgain) {
  namespace proto = detail::store_protocol;
  int port = 0;
  Socket listener = test::foreign_listener(port);
  std::thread server([&] {
    for (const auto status : {proto::kBusy, proto::kOk}) {
      pollfd p{listener.fd, POLLIN, 0};
      if (::poll(&p, 1, 5000) != 1) break;  // the client gave up after kBusy
      Socket c(::accept(listener.fd, nullptr, nullptr));
      (void)test::read_some(c.fd, 2s);  // the hello
      const std::string answer = proto::Writer().u8(status).str("busy").frame();
      ASSERT_EQ(::send(c.fd, answer.data(), answer.size(), MSG_NOSIGNAL),
                static_cast<ssize_t>(answer.size()));
      if (status == proto::kOk) (void)test::read_some(c.fd, 2s);  // until the client leaves
    }
  });
  test::run_in_child([&] { EXPECT_NE(store_client(port, "", 5s), nullptr); });
  server.join();
}

TEST(StoreLimits, C10dClientsShareTheWorkersKeysWithDpxClients) {
  auto server = agent_store("t");
  auto pytorch = c10d_client(server->port());  // TCPStore puts "/" before each key
  auto dpx = store_client(server->port(), "t", 5s);
  pytorch->set("a", "1");
  EXPECT_EQ(dpx->get("/a"), "1");
  dpx->set("/b", "2");
  EXPECT_EQ(pytorch->get("b"), "2");
  EXPECT_EQ(pytorch->add("n", 5), 5);
  EXPECT_EQ(dpx->add("/n", 1), 6);
  EXPECT_EQ(pytorch->compare_set("a", "1", "3"), "3");
  EXPECT_EQ(pytorch->compare_set("fresh", "", "x"), "x");
  EXPECT_TRUE(pytorch->check({"a", "b"}));
  EXPECT_FALSE(pytorch->check({"a", "missing"}));
  pytorch->wait({"a", "b"}, 1s);
  const auto start = Clock::now();
  EXPECT_THROW(pytorch->wait({"never"}, 300ms), DistributedError);
  EXPECT_LT(test::seconds_since(start), 3.0);
  EXPECT_TRUE(pytorch->delete_key("b"));
  EXPECT_FALSE(dpx->check({"/b"}));
  EXPECT_EQ(pytorch->get("a"), "3");  // still in step after the timed-out wait
}

// A c10d client cannot present the job token, so it reaches only the keys c10d's clients use.
TEST(StoreLimits, C10dClientsCannotTouchTheTokenGuardedKeys) {
  auto server = agent_store("t");
  auto dpx = store_client(server->port(), "t", 5s);
  dpx->set("dpxrun/job/state", "0:0");
  // PyTorch 1.x's SET (op 0) of "dpxrun/job/state", written by hand: no "/" in front.
  auto u64 = [](std::uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); };
  const std::string key = "dpxrun/job/state", value = "failed";
  Socket raw = raw_client(server->port(), std::string(1, '\0') + u64(key.size()) + key +
                                              u64(value.size()) + value);
  EXPECT_TRUE(closed_by_server(raw.fd, 2s));
  EXPECT_EQ(dpx->get("dpxrun/job/state"), "0:0");
  // Nor can one that announces a 2^40-byte key stall anybody.
  Socket huge = raw_client(server->port(), std::string(1, '\2') + u64(1ull << 40));
  EXPECT_TRUE(closed_by_server(huge.fd, 2s));
  dpx->set("/still", "here");
  EXPECT_EQ(c10d_client(server->port())->get("still"), "here");
}

}  // namespace
}  // namespace dpx
