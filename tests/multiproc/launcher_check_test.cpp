// dpxrun --check: a healthy node reports versions, backends, reachability, shared memory and
// interfaces; each planted problem (a wrong master address, a port already taken, a small
// /dev/shm) is named in one line.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>

#include "support/launcher_harness.h"

namespace dpx::test {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

std::vector<std::string> check(std::vector<std::string> flags,
                               std::vector<std::string> prefix = {}) {
  std::vector<std::string> out = std::move(prefix);
  out.push_back(dpxrun_path());
  out.push_back("--check");
  out.insert(out.end(), flags.begin(), flags.end());
  return out;
}

std::vector<std::string> lines_with(const std::string& output, const std::string& word) {
  std::vector<std::string> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.find(word) != std::string::npos) out.push_back(line);
  }
  return out;
}

LaunchOptions without_launcher_env() {
  LaunchOptions o;
  o.unset_env.insert(o.unset_env.end(), {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                         "GLOO_SOCKET_IFNAME", "DPX_BACKEND"});
  return o;
}

TEST(LauncherCheck, AHealthyNodeReportsEverythingAndNoProblem) {
  auto r = run_launcher(check({"--standalone", "--nproc-per-node", "2"}), seconds(60), without_launcher_env());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(": LibTorch " + std::to_string(TORCH_VERSION_MAJOR) + "." +
                                  std::to_string(TORCH_VERSION_MINOR) + "."));
  EXPECT_THAT(r.output, HasSubstr(", dpx 0."));
  EXPECT_THAT(r.output, HasSubstr("rank 0: backend: auto picks shm for every pair of ranks"));
  EXPECT_THAT(r.output, HasSubstr("rank 0: gloo: all 2 ranks reach each other"));
  EXPECT_THAT(r.output, HasSubstr("rank 0: shm: all 2 ranks reach each other"));
  EXPECT_THAT(r.output, HasSubstr("rank 0: gloo listens on 127.0.0.1 (lo), the route to "
                                  "MASTER_ADDR 127.0.0.1"));
  EXPECT_THAT(r.output, HasSubstr("rank 0: shm backend: its segment for 2 local ranks takes "
                                  "about 4.0 MiB of memory; /dev/shm has "));
  EXPECT_THAT(r.output, HasSubstr("dpxrun --check: this node found no problem"));
  EXPECT_THAT(lines_with(r.output, "PROBLEM"), ::testing::IsEmpty()) << r.output;
}

TEST(LauncherCheck, AMasterAddressOfAnotherHostOnNodeZeroIsNamed) {
  auto r = run_launcher(check({"--master-addr", "192.0.2.77", "--master-port",
                               std::to_string(free_tcp_port()), "true"}),
                        seconds(60), without_launcher_env());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  auto problems = lines_with(r.output, "PROBLEM");
  ASSERT_EQ(problems.size(), 1u) << r.output;
  EXPECT_THAT(problems[0], HasSubstr("--master-addr, --master-port names 192.0.2.77, which is "
                                     "not an address of this host, but this node serves the "
                                     "rendezvous store there"));
}

TEST(LauncherCheck, AMasterThatDoesNotAnswerIsNamed) {
  const std::string port = std::to_string(free_tcp_port());
  auto r = run_launcher(check({"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1",
                               "--master-port", port, "--rdzv-conf", "join_timeout=1"}),
                        seconds(60), without_launcher_env());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  auto problems = lines_with(r.output, "PROBLEM");
  ASSERT_EQ(problems.size(), 1u) << r.output;
  EXPECT_THAT(problems[0], HasSubstr("cannot reach the rendezvous store at 127.0.0.1:" + port +
                                     " (--master-addr, --master-port) within 1 s: Connection "
                                     "refused"));
}

TEST(LauncherCheck, APortAlreadyTakenIsNamed) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string port = std::to_string(ntohs(a.sin_port));
  auto r = run_launcher(check({"--master-port", port}), seconds(60), without_launcher_env());
  ::close(fd);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  auto problems = lines_with(r.output, "PROBLEM");
  ASSERT_EQ(problems.size(), 1u) << r.output;
  EXPECT_THAT(problems[0], HasSubstr("port " + port + " of this host is already taken by another "
                                     "program, so the rendezvous store cannot listen on "
                                     "127.0.0.1:" + port));
}

TEST(LauncherCheck, ASmallDevShmIsNamed) {
  if (geteuid() != 0 || std::system("command -v unshare >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "a private /dev/shm needs root and unshare(1)";
  }
  // A 1 MiB tmpfs on /dev/shm in a private mount namespace, as in a small container.
  std::string cmd = "mount -t tmpfs -o size=1m tmpfs /dev/shm && exec";
  for (const auto& w : check({"--standalone", "--nproc-per-node", "2"})) cmd += " '" + w + "'";
  auto r = run_launcher({"unshare", "-m", "sh", "-c", cmd}, seconds(60), without_launcher_env());
  ASSERT_EQ(r.exit_code, 0) << r.output;  // dpx's shm backend does not live in /dev/shm
  auto named = lines_with(r.output, "WARNING");
  ASSERT_EQ(named.size(), 1u) << r.output;
  EXPECT_THAT(named[0], HasSubstr("rank 0: /dev/shm has 1.0 MiB free, less than the 4.0 MiB "
                                  "segment of the shm backend"));
  EXPECT_THAT(named[0], HasSubstr("enlarge it (docker run --shm-size=1g"));
}

}  // namespace
}  // namespace dpx::test
