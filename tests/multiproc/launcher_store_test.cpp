// dpxrun's rendezvous stores against a foreign program on their port and clients that send half
// a request or garbage, and the static store as PyTorch programs use it (Note [Rendezvous stores]
// in tools/dpxrun/rendezvous.cpp).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "dpx/errors.h"
#include "support/expect_throws.h"
#include "support/harness.h"
#include "support/launcher_harness.h"
#include "support/python_oracle.h"
#include "support/raw_socket.h"

namespace dpx::test {
namespace {

using test::raw_client;
using test::Socket;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

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

std::string sum_of(const std::string& dir, int rank) {
  std::ifstream sum(dir + "/sum_" + std::to_string(rank));
  std::string line;
  std::getline(sum, line);
  return line;
}

std::string u64(std::uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

TEST(LauncherStore, TakenEndpointPortEndsAtTheJoinTimeout) {
  Socket listener(::socket(AF_INET, SOCK_STREAM, 0));
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
  Socket hostile(::socket(AF_INET, SOCK_STREAM, 0));
  auto a = loopback(port);
  ASSERT_EQ(::connect(hostile.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const std::string half = std::string("\x64\0\0\0", 4) + std::string(10, 'x');
  ASSERT_EQ(::send(hostile.fd, half.data(), half.size(), MSG_NOSIGNAL), 14);
  const auto start = Clock::now();
  auto r = job.wait(60s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds_since(start), 40.0);
  EXPECT_EQ(sum_of(dir.path(), 1), "3 2");
}

// The static store serves c10d's protocol to the workers, and garbage in that protocol that
// announces huge lengths, or half a request held open, stalls nobody (c10d's own server did).
TEST(LauncherStore, GarbageOnTheStaticStoreHarmsNoJob) {
  TempDir dir;
  const int port = free_tcp_port();
  Launch job({dpxrun_path(), "--nproc-per-node", "2", "--master-port", std::to_string(port),
              test_worker_path(), "allreduce", dir.path(), "1"});
  ASSERT_TRUE(wait_until([&] { return port_listening(port); }, 30s)) << job.output_so_far();
  // PyTorch 1's SET (op 0) announcing a 2^60-byte key, PyTorch 2's VALIDATE then SET with a
  // 2^40-byte value, and a GET whose key stops halfway; all held open.
  Socket huge_key = raw_client(port, std::string(1, '\0') + u64(1ull << 60));
  Socket huge_value = raw_client(port, std::string(1, '\0') + "\xce\xf7\x85\x3c" +
                                           std::string(1, '\1') + u64(2) + "/k" + u64(1ull << 40));
  Socket half = raw_client(port, std::string(1, '\2') + u64(100) + std::string(10, 'x'));
  const auto start = Clock::now();
  auto r = job.wait(60s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds_since(start), 40.0);
  EXPECT_EQ(sum_of(dir.path(), 1), "3 2");
}

// The static store is dpx's own, so the job token guards it: a dpx client with another token is
// refused at once, one with the job's token gets in (c10d's server, which it replaced, answered
// neither).
TEST(LauncherStore, TheStaticStoreDemandsTheJobToken) {
  TempDir dir;
  const int port = free_tcp_port();
  LaunchOptions o;
  o.set_env["DPX_STORE_TOKEN"] = "s3cret";
  Launch job({dpxrun_path(), "--nproc-per-node", "1", "--master-port", std::to_string(port),
              test_worker_path(), "sleep", dir.path()},
             o);
  ASSERT_TRUE(wait_until([&] { return port_listening(port); }, 30s)) << job.output_so_far();
  auto client = [&](const std::string& token) { return store_client(port, token, 5s); };
  const auto start = Clock::now();
  const std::string msg = expect_throws<DistributedError>([&] { client("another"); });
  EXPECT_NE(msg.find("the job token does not match"), std::string::npos) << msg;
  EXPECT_LT(seconds_since(start), 2.0);
  EXPECT_NO_THROW(client("s3cret"));
}

// torch.distributed's own init_process_group(env://) under dpxrun's static rendezvous, as under
// torchrun: it joins the launcher's store with c10d's TCPStore client.
TEST(LauncherStore, PyTorchWorkersUseTheStaticStoreAsTheyDoTorchruns) {
  DPX_SKIP_UNLESS_PYTHON_HAS(DPX_PYTHON, "torch.distributed");
  TempDir dir;
  auto r = run_launcher({dpxrun_path(), "--nproc-per-node", "2", "--master-port",
                         std::to_string(free_tcp_port()), DPX_PYTHON,
                         DPX_SOURCE_DIR "/tests/python/agent_store_worker.py", dir.path()},
                        120s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(sum_of(dir.path(), 0), "3 2");
  EXPECT_EQ(sum_of(dir.path(), 1), "3 2");
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
