// Argument and environment errors of init_process_group, before any connection is made.
#include <stdlib.h>

#include <torch/torch.h>

#include "comm/init/init_url.h"
#include "dpx/dpx.h"

namespace dpx {
namespace {

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR_HAS(body, text) \
  EXPECT_THAT(error_of([&] { body; }), ::testing::HasSubstr(text))

// Sets the launcher's variables for one test and restores a clean environment after it.
class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "DPX_BACKEND",
                          "DPX_DEBUG", "TORCH_DISTRIBUTED_DEBUG", "DPX_SHM_SLOT_BYTES",
                          "DPX_SHM_SMALL_BYTES", "DPX_SHM_SPIN_US"}) {
      ::unsetenv(v);
    }
  }
};

TEST(InitUrl, ParsesTcpAndFile) {
  auto tcp = detail::parse_init_url("tcp://10.1.2.3:1234?rank=1&world_size=4");
  EXPECT_EQ(tcp.scheme, "tcp");
  EXPECT_EQ(tcp.host, "10.1.2.3");
  EXPECT_EQ(tcp.port, 1234);
  EXPECT_EQ(tcp.rank, 1);
  EXPECT_EQ(tcp.world_size, 4);
  auto v6 = detail::parse_init_url("tcp://[::1]:80");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.rank, -1);
  auto file = detail::parse_init_url("file:///tmp/x/store?world_size=2&rank=0");
  EXPECT_EQ(file.path, "/tmp/x/store");
  EXPECT_EQ(file.world_size, 2);
}

TEST(InitUrl, RejectsMalformed) {
  EXPECT_ERROR_HAS(detail::parse_init_url("udp://h:1"), "unknown init method 'udp://h:1'");
  EXPECT_ERROR_HAS(detail::parse_init_url("localhost:29500"), "use env://, tcp://");
  EXPECT_ERROR_HAS(detail::parse_init_url("file://?rank=0&world_size=1"), "needs an absolute path");
  EXPECT_ERROR_HAS(detail::parse_init_url("tcp://host"), "needs a host and a port");
  EXPECT_ERROR_HAS(detail::parse_init_url("tcp://h:x"), "port must be an integer");
  EXPECT_ERROR_HAS(detail::parse_init_url("tcp://h:1?rank=a"), "rank must be an integer");
  EXPECT_ERROR_HAS(detail::parse_init_url("tcp://h:1?size=2"), "unknown parameter 'size'");
}

TEST_F(EnvTest, MissingVariablesAreNamed) {
  EXPECT_ERROR_HAS(init_process_group(), "environment variable RANK expected, but not set");
  ::setenv("RANK", "0", 1);
  EXPECT_ERROR_HAS(init_process_group(), "environment variable WORLD_SIZE expected, but not set");
  ::setenv("WORLD_SIZE", "1", 1);
  EXPECT_ERROR_HAS(init_process_group(), "environment variable MASTER_ADDR expected, but not set");
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  EXPECT_ERROR_HAS(init_process_group(), "environment variable MASTER_PORT expected, but not set");
  ::setenv("MASTER_PORT", "29x", 1);
  EXPECT_ERROR_HAS(init_process_group(), "MASTER_PORT must be an integer, got '29x'");
}

TEST_F(EnvTest, RankAndWorldSizeAreChecked) {
  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  EXPECT_ERROR_HAS(init_process_group(), "rank 2 is out of range for world_size 2");
  ::setenv("WORLD_SIZE", "0", 1);
  EXPECT_ERROR_HAS(init_process_group(), "world_size must be at least 1, got 0");
  InitOptions o;
  o.init_method = "file:///tmp/dpx-never-created";
  EXPECT_ERROR_HAS(init_process_group(o), "needs rank and world_size");
  o.init_method = "file:///tmp/dpx-never-created?rank=-1&world_size=2";
  EXPECT_ERROR_HAS(init_process_group(o), "needs rank and world_size");
  o.init_method = "gopher://x";
  EXPECT_ERROR_HAS(init_process_group(o), "unknown init method 'gopher://x'");
}

// A name that does not resolve is reported as such at once, not as a store that gave no answer
// within the timeout (".invalid" never resolves, RFC 2606).
TEST_F(EnvTest, UnresolvableMasterAddrIsNamed) {
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("MASTER_ADDR", "dpx-no-such-host.invalid", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  InitOptions o;
  o.timeout = std::chrono::seconds(60);
  const auto start = std::chrono::steady_clock::now();
  const std::string error = error_of([&] { init_process_group(o); });
  EXPECT_THAT(error, ::testing::HasSubstr(
                         "MASTER_ADDR 'dpx-no-such-host.invalid' does not resolve to an address"));
  EXPECT_THAT(error, ::testing::Not(::testing::HasSubstr("no answer")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  ::unsetenv("MASTER_ADDR");
  o.init_method = "tcp://dpx-no-such-host.invalid:29500?rank=1&world_size=2";
  EXPECT_ERROR_HAS(init_process_group(o),
                   "the init method's host 'dpx-no-such-host.invalid' does not resolve");
}

TEST_F(EnvTest, UnknownBackendAndDebugLevel) {
  InitOptions o;
  o.backend = "ucc";
  EXPECT_ERROR_HAS(init_process_group(o), "unknown backend 'ucc'; use auto, shm, gloo, "
                                          "hierarchical, nccl, mpi or hierarchical-mpi");
  ::setenv("DPX_BACKEND", "ucx", 1);
  EXPECT_ERROR_HAS(init_process_group(), "unknown backend 'ucx'");
  ::setenv("DPX_DEBUG", "LOUD", 1);
  EXPECT_ERROR_HAS(debug_level(), "DPX_DEBUG must be OFF, INFO or DETAIL, got 'LOUD'");
}

// Each subsystem reads only its own variables (Note [Environment]).
TEST_F(EnvTest, AMalformedShmVariableBreaksOnlyTheShmBackend) {
  ::setenv("DPX_SHM_SPIN_US", "fast", 1);
  torch::nn::Linear net(3, 2);
  DistributedDataParallel ddp(net, new_process_group("gloo", Store::hash(), 0, 1));
  ddp->forward(at::ones({4, 3})).sum().backward();
  EXPECT_TRUE(net->weight.grad().defined());
  EXPECT_ERROR_HAS(new_process_group("shm", Store::hash(), 0, 1),
                   "environment variable DPX_SHM_SPIN_US must be an integer, got 'fast'");
  ::setenv("DPX_SHM_SPIN_US", "-5", 1);
  EXPECT_ERROR_HAS(new_process_group("shm", Store::hash(), 0, 1),
                   "environment variable DPX_SHM_SPIN_US must be >= 0, got '-5'");
  ::unsetenv("DPX_SHM_SPIN_US");
  ::setenv("DPX_SHM_SLOT_BYTES", "100", 1);
  EXPECT_ERROR_HAS(new_process_group("shm", Store::hash(), 0, 1),
                   "environment variable DPX_SHM_SLOT_BYTES must be >= 4096, got '100'");
}

TEST_F(EnvTest, AMalformedDebugLevelBreaksOnlyWhatReadsIt) {
  ::setenv("DPX_DEBUG", "LOUD", 1);
  ::setenv("DPX_SHM_SMALL_BYTES", "x", 1);
  auto pg = new_process_group("gloo", Store::hash(), 0, 1);  // a group has no use for either
  auto t = at::ones({2});
  pg->allreduce(t)->wait();
  torch::nn::Linear net(3, 2);
  EXPECT_ERROR_HAS(DistributedDataParallel(net, pg), "DPX_DEBUG must be OFF, INFO or DETAIL");
}

TEST_F(EnvTest, SingleRankFileStoreWorks) {
  char dir[] = "/tmp/dpx-init-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  InitOptions o;
  o.backend = "gloo";
  o.init_method = std::string("file://") + dir + "/store?rank=0&world_size=1";
  auto pg = init_process_group(o);
  auto t = at::arange(5, at::kFloat);
  pg->allreduce(t)->wait();
  EXPECT_TRUE(t.equal(at::arange(5, at::kFloat)));
  pg.reset();
  ::system((std::string("rm -rf ") + dir).c_str());
}

TEST(ProcessGroupArgs, BadTensorsAreRefused) {
  auto pg = new_process_group("gloo", Store::hash(), 0, 1);
  auto strided = at::ones({4, 4}).t();
  EXPECT_ERROR_HAS(pg->allreduce(strided), "must be contiguous");
  auto boolean = at::ones({4}, at::kBool);
  EXPECT_ERROR_HAS(pg->allreduce(boolean), "dtype Bool is not supported");
  auto ints = at::ones({4}, at::kInt);
  EXPECT_ERROR_HAS(pg->allreduce(ints, {ReduceOp::kAvg}), "avg needs a floating-point tensor");
  auto out = at::empty({3});
  EXPECT_ERROR_HAS(pg->allgather(out, at::ones({4})), "needs world_size (1) x input (4)");
  auto doubles = at::empty({4}, at::kDouble);
  EXPECT_ERROR_HAS(pg->allgather(doubles, at::ones({4})), "differs from input dtype");
  auto t = at::ones({4});
  EXPECT_ERROR_HAS(pg->broadcast(t, {3}), "root 3 is out of range");
  pg->allreduce(t)->wait();  // a valid call still succeeds
  EXPECT_TRUE(t.equal(at::ones({4})));
  EXPECT_THAT(pg->where(), ::testing::MatchesRegex("\\[rank 0/1 .*:[0-9]+\\] "));
}

}  // namespace
}  // namespace dpx
