// Several ranks on the GPU: fully_shard against one process and against the same sharding on
// the CPU (over shm staged through host memory, and over nccl), and NCCL's failure paths: a
// killed rank and a stopped one end the others with typed errors within the timeout, and their
// groups are destroyed without waiting for the work the fault left behind. With one GPU the
// nccl ranks share it (Note [NCCL ranks sharing a GPU]). Skipped without a GPU.
#include <signal.h>
#include <unistd.h>

#include <torch/torch.h>

#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/fsdp/fully_shard.h"
#include "multiproc/cuda_ranks.h"
#include "support/expect_throws.h"
#include "support/fsdp_models.h"

namespace dpx {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

class FsdpCuda : public test::GpuRanksTest {};

constexpr int kWorld = 2;
constexpr int kSteps = 4;
constexpr int64_t kPerRank = 3;

struct FsdpData {
  std::vector<torch::Tensor> x, y;  // per step, the whole batch, float32 on the CPU
};

FsdpData fsdp_data() {
  torch::manual_seed(3);
  FsdpData d;
  for (int s = 0; s < kSteps; ++s) {
    d.x.push_back(torch::randn({kWorld * kPerRank, 6}));
    d.y.push_back(torch::randn({kWorld * kPerRank, 4}));
  }
  return d;
}

// kSteps of SGD on `device`: the rows of `rank` of `world` (world 1: the whole batch, one
// process, unsharded). Returns the full state dict on the CPU, in float32.
NamedTensors train_fsdp(const FsdpData& data, at::Device device, int rank, int world,
                        std::shared_ptr<ProcessGroup> pg, const FullyShardOptions& options) {
  auto net = test::make_shard_net(/*tied=*/false, torch::kFloat);
  net->to(device);
  std::optional<FSDPModule<test::ShardNetImpl>> model;
  if (pg) model.emplace(test::shard(net, pg, options));
  auto opt = test::sgd(test::unique_parameters(*net));
  for (int s = 0; s < kSteps; ++s) {
    opt->zero_grad();
    auto x = data.x[s].narrow(0, rank * kPerRank, kPerRank * (pg ? 1 : world)).to(device);
    auto y = data.y[s].narrow(0, rank * kPerRank, kPerRank * (pg ? 1 : world)).to(device);
    auto out = model ? (*model)(x) : net->forward(x);
    torch::mse_loss(out.to(torch::kFloat), y).backward();
    opt->step();
  }
  NamedTensors state = pg ? full_state_dict(*net, {.rank0_only = false}) : test::named_state(*net);
  for (auto& [name, t] : state) t = t.detach().to(at::kCPU, torch::kFloat);
  return state;
}

void expect_state_close(const NamedTensors& got, const NamedTensors& want, double tol,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first) << what;
    EXPECT_TRUE(torch::allclose(got[i].second, want[i].second, tol, tol))
        << what << ": " << got[i].first << " differs by "
        << (got[i].second - want[i].second).abs().max().item<double>();
  }
}

// float32, with both prefetches on (the default) and off: against one process on the GPU
// (unsharded, the whole batch) and against the same sharding over shm on the CPU.
// kWorld ranks on the GPU over `backend`, each also in a CPU group (shm) of the same ranks, with
// the data made in each rank (torch::manual_seed in the test process would start CUDA there).
template <typename Body>
void on_gpu_and_cpu_ranks(const std::string& backend, Body body) {
  test::StoreServer cpu_server;
  test::on_gpu_ranks(backend, kWorld, [&](int rank, std::shared_ptr<ProcessGroup> pg,
                                          at::Device device) {
    body(rank, pg, new_process_group("shm", cpu_server.client(), rank, kWorld), device,
         fsdp_data());
  });
}

TEST_P(FsdpCuda, Float32MatchesOneProcessAndTheCpu) {
  on_gpu_and_cpu_ranks(GetParam(), [](int rank, std::shared_ptr<ProcessGroup> pg,
                                      std::shared_ptr<ProcessGroup> cpu_pg, at::Device device,
                                      const FsdpData& data) {
    const auto one_process = train_fsdp(data, device, 0, kWorld, nullptr, {});
    for (bool prefetch : {true, false}) {
      FullyShardOptions o;
      o.forward_prefetch = o.backward_prefetch = prefetch;
      const std::string what = prefetch ? "with prefetch" : "without prefetch";
      const auto gpu = train_fsdp(data, device, rank, kWorld, pg, o);
      expect_state_close(gpu, one_process, 1e-5, what + ", against one process");
      expect_state_close(gpu, train_fsdp(data, at::kCPU, rank, kWorld, cpu_pg, o), 1e-4,
                         what + ", against the CPU");
    }
  });
}

// bfloat16 compute (param_dtype; gradients reduced in float32, PyTorch's rule for float32
// parameters) against the same policy on the CPU: bfloat16 matrix products round differently
// on the two, so close to bfloat16's precision, not equal.
TEST_P(FsdpCuda, Bfloat16ComputeMatchesTheCpu) {
  on_gpu_and_cpu_ranks(GetParam(), [](int rank, std::shared_ptr<ProcessGroup> pg,
                                      std::shared_ptr<ProcessGroup> cpu_pg, at::Device device,
                                      const FsdpData& data) {
    FullyShardOptions o;
    o.mp_policy.param_dtype = torch::kBFloat16;
    const auto gpu = train_fsdp(data, device, rank, kWorld, pg, o);
    expect_state_close(gpu, train_fsdp(data, at::kCPU, rank, kWorld, cpu_pg, o), 2e-2,
                       "bfloat16, against the CPU");
    // And it did compute in bfloat16: float32 compute ends elsewhere.
    const auto float32 = train_fsdp(data, device, rank, kWorld, pg, {});
    double most = 0;
    for (std::size_t i = 0; i < gpu.size(); ++i) {
      most = std::max(most, (gpu[i].second - float32[i].second).abs().max().item<double>());
    }
    EXPECT_GT(most, 1e-5) << "param_dtype bfloat16 trained exactly as float32";
  });
}

// A unit on cuda:1 while cuda:0 is current: its gathered parameters are allocated on cuda:1, not
// on the current device (the CUDA allocator's default). Two GPUs.
TEST(FsdpCudaDevices, UnshardedStorageIsOnTheParametersGpu) {
  if (test::gpus_seen_by_a_child() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  if (!cuda::built()) GTEST_SKIP() << "dpx built without CUDA (DPX_CUDA)";
  test::expect_all_ok(test::run_processes(1, [](int) {
    const at::Device second(at::kCUDA, 1);
    ProcessGroup::Options o;
    o.device = second;
    auto pg = new_process_group("nccl", Store::hash(), 0, 1, o);
    auto net = test::make_shard_net(/*tied=*/false, torch::kFloat);
    net->to(second);
    auto model = test::shard(net, pg);
    cuda::set_current_device(at::Device(at::kCUDA, 0));
    model.fsdp().unshard();
    for (const auto& p : net->parameters()) {
      EXPECT_EQ(p.storage().data_ptr().device(), second);
    }
  }));
}

INSTANTIATE_TEST_SUITE_P(OnOneGpu, FsdpCuda, ::testing::ValuesIn(test::gpu_sharing_backends()),
                         test::backend_param_name);

#define SKIP_WITHOUT_NCCL()                                                               \
  if (test::gpus_seen_by_a_child() == 0) GTEST_SKIP() << "no CUDA device";                \
  if (!cuda::built()) GTEST_SKIP() << "dpx built without CUDA (DPX_CUDA)"

// Destroying a group that saw a fault returns promptly (Note [Aborting a failed NCCL group]).
// Progress goes to stderr, unbuffered: a rank killed for hanging still shows how far it got.
void progress(int rank, const std::string& what) {
  std::cerr << "rank " << rank << ": " << what << std::endl;
}

void expect_destroyed_promptly(int rank, std::shared_ptr<ProcessGroup>& pg) {
  progress(rank, "destroying the group");
  const auto start = std::chrono::steady_clock::now();
  pg.reset();
  progress(rank, "destroyed in " + std::to_string(test::seconds_since(start)) + " s");
  EXPECT_LT(test::seconds_since(start), 10.0) << "destroying the failed group waited";
}

// A fault test's ranks are killed this long after their group's timeout (on_gpu_ranks): short,
// so that a hang is reported, with each rank's progress, well inside gpu_check's step budget.
constexpr milliseconds kFaultGrace = seconds(12);

// Three nccl ranks; the third dies (SIGKILL) once all are connected. The two others get
// PeerLostError, before the 8 s timeout, and end.
TEST(NcclFaults, AKilledRankIsPeerLostOnTheOthersAndTheyExit) {
  SKIP_WITHOUT_NCCL();
  constexpr milliseconds kTimeout = seconds(8);
  auto results = test::on_gpu_ranks("nccl", 3, [&](int rank, std::shared_ptr<ProcessGroup> pg,
                                                   at::Device device) {
    auto t = torch::ones({1 << 16}, torch::TensorOptions().device(device));
    pg->allreduce(t)->wait();  // everyone is connected
    progress(rank, "connected");
    if (rank == 2) test::kill_this_rank();
    const auto start = std::chrono::steady_clock::now();
    const auto msg = test::expect_throws<PeerLostError>([&] {
      for (int i = 0; i < 1000; ++i) pg->allreduce(t)->wait();
    });
    progress(rank, "after " + std::to_string(test::seconds_since(start)) + " s: " + msg);
    EXPECT_LT(test::seconds_since(start), 8.0);
    expect_destroyed_promptly(rank, pg);
  }, kTimeout, /*check_all_ok=*/false, kFaultGrace);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[2].signal, SIGKILL);
  for (int r : {0, 1}) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << (results[r].timed_out ? " (hung)" : "") << ": "
                                 << results[r].output;
  }
}

// Two nccl ranks; the second stops (SIGSTOP) once connected, alive but silent. The first gets
// TimeoutError after its 3 s timeout, destroys its group without waiting for the collective the
// stopped rank holds, then ends the stopped one.
TEST(NcclFaults, AStoppedRankIsATimeoutOnTheOtherAndItExits) {
  SKIP_WITHOUT_NCCL();
  constexpr milliseconds kTimeout = seconds(3);
  test::StoreServer side;  // for the stopped rank's pid
  auto results = test::on_gpu_ranks("nccl", 2, [&](int rank, std::shared_ptr<ProcessGroup> pg,
                                                   at::Device device) {
    auto store = side.client();
    auto t = torch::ones({1 << 16}, torch::TensorOptions().device(device));
    pg->allreduce(t)->wait();
    progress(rank, "connected");
    if (rank == 1) {
      store->set("pid", std::to_string(::getpid()));
      ::raise(SIGSTOP);
      return;  // never reached: rank 0 kills this process
    }
    const auto pid = static_cast<pid_t>(std::stol(store->get("pid")));
    const auto start = std::chrono::steady_clock::now();
    const auto msg = test::expect_throws<TimeoutError>([&] { pg->allreduce(t)->wait(); });
    progress(rank, "after " + std::to_string(test::seconds_since(start)) + " s: " + msg);
    EXPECT_LT(test::seconds_since(start), 13.0);
    expect_destroyed_promptly(rank, pg);
    ::kill(pid, SIGKILL);
  }, kTimeout, /*check_all_ok=*/false, kFaultGrace);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok()) << (results[0].timed_out ? "(hung) " : "") << results[0].output;
  EXPECT_EQ(results[1].signal, SIGKILL);
}

}  // namespace
}  // namespace dpx
