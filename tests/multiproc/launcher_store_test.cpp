// dpxrun's c10d rendezvous store against a foreign program on its port and a client that sends
// half a request (Note [Rendezvous stores] in tools/dpxrun/rendezvous.cpp).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "support/harness.h"
#include "support/launcher_harness.h"

namespace dpx::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Socket {
  int fd = -1;
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(LauncherStore, TakenEndpointPortEndsAtTheJoinTimeout) {
  Socket listener{::socket(AF_INET, SOCK_STREAM, 0)};
  auto a = loopback(0);
  ASSERT_EQ(::bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(listener.fd, 16), 0);
  socklen_t len = sizeof(a);
  ::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string endpoint = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  const auto start = Clock::now();
  auto r = run_launcher({dpxrun_path(), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                         "--rdzv-conf", "join_timeout=3", "/bin/true"},
                        60s);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("did not answer dpx's store handshake"), std::string::npos) << r.output;
  EXPECT_GE(seconds_since(start), 2.5);
  EXPECT_LT(seconds_since(start), 20.0);  // join_timeout=3, loosely
}

TEST(LauncherStore, HalfARequestOnTheRendezvousStoreHarmsNoJob) {
  TempDir dir;
  const int port = free_tcp_port();
  Launch job({dpxrun_path(), "--rdzv-backend", "c10d", "--rdzv-endpoint",
              "127.0.0.1:" + std::to_string(port), "--nproc-per-node", "2", test_worker_path(),
              "allreduce", dir.path(), "1"});
  ASSERT_TRUE(wait_until([&] { return port_listening(port); }, 30s)) << job.output_so_far();
  // Half a frame: a length of 100 bytes, then 10 of them, and the connection held open.
  Socket hostile{::socket(AF_INET, SOCK_STREAM, 0)};
  auto a = loopback(port);
  ASSERT_EQ(::connect(hostile.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const std::string half = std::string("\x64\0\0\0", 4) + std::string(10, 'x');
  ASSERT_EQ(::send(hostile.fd, half.data(), half.size(), MSG_NOSIGNAL), 14);
  const auto start = Clock::now();
  auto r = job.wait(60s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds_since(start), 40.0);
  std::ifstream sum(dir.path() + "/sum_1");
  std::string line;
  std::getline(sum, line);
  EXPECT_EQ(line, "3 2");
}

// The job token reaches the workers: the user's DPX_STORE_TOKEN, else the (random) run id.
TEST(LauncherStore, WorkersGetTheJobToken) {
  TempDir random_id, secret;
  LaunchOptions none;
  none.unset_env.push_back("DPX_STORE_TOKEN");
  auto r = run_launcher({dpxrun_path(), "--standalone", "--nproc-per-node", "2",
                         test_worker_path(), "env", random_id.path()},
                        60s, none);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (auto& env : read_worker_envs(random_id.path())) {
    EXPECT_FALSE(env["DPX_STORE_TOKEN"].empty());
    EXPECT_EQ(env["DPX_STORE_TOKEN"], env["TORCHELASTIC_RUN_ID"]);
  }
  LaunchOptions o;
  o.set_env["DPX_STORE_TOKEN"] = "s3cret";
  r = run_launcher({dpxrun_path(), "--standalone", test_worker_path(), "env", secret.path()},
                   60s, o);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto envs = read_worker_envs(secret.path());
  ASSERT_EQ(envs.size(), 1u);
  EXPECT_EQ(envs[0]["DPX_STORE_TOKEN"], "s3cret");
}

}  // namespace
}  // namespace dpx::test
