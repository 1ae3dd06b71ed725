// DDP on CUDA modules: one rank over nccl with its reduction forced, against plain LibTorch;
// two and three processes sharing one GPU (over shm staged through host memory, and over nccl)
// against one process on the whole batch; both also called from a non-default stream. Skipped
// without a GPU.
// The parent never touches CUDA (a forked child could not use it then): a child counts GPUs.
#include <torch/torch.h>

#include <thread>

#include "multiproc/cuda_ranks.h"
#include "support/cuda_contexts.h"
#include "support/side_stream.h"

namespace dpx::ddp_cuda_test {
namespace {

using test::mlp_on;
using test::on_cpu;

constexpr int kSteps = 4;
constexpr int kPerRank = 8;

// `steps` SGD steps of `net` on the batches (sliced for `rank` of `world`). `late`: each input
// arrives on the current stream after tens of milliseconds of queued work (test::arrives_late).
template <typename Net>
void train(Net& net, std::vector<torch::Tensor> params, const std::vector<test::Batch>& batches,
           int rank, int world, at::Device device, bool late = false) {
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1));
  for (const auto& b : batches) {
    auto part = test::slice(b, rank, world);
    opt.zero_grad();
    auto x = late ? test::arrives_late(part.x, device) : part.x.to(device);
    auto loss = torch::nn::functional::cross_entropy(net->forward(x), part.y.to(device));
    loss.backward();
    opt.step();
  }
}

// A comm hook that reduces out of place: the bucket all-gathered over the group (a sum over one
// rank), so the gradients reach .grad only through the collective's output.
std::shared_ptr<Future> gather_hook(std::any&, GradBucket& bucket) {
  auto out = at::empty_like(bucket.buffer);
  auto work = bucket.process_group->allgather(out, bucket.buffer);
  return Future::from_work(std::move(work), out);
}

// One rank over nccl with its reduction forced (without a hook, one rank reduces nothing),
// called from a non-default stream whose inputs arrive late: the buckets, the collectives and
// the write-back must all follow that stream, or the gradients are NaN or stale. Against plain
// LibTorch on the same stream.
TEST(DdpCuda, OneRankOverNcclReducesInStreamOrderFromASideStream) {
  if (test::gpus_seen_by_a_child() == 0) GTEST_SKIP() << "no CUDA device";
  if (!cuda::built()) GTEST_SKIP() << "dpx built without CUDA (DPX_CUDA)";
  test::expect_all_ok(test::run_processes(1, [](int) {
    const at::Device device("cuda:0");
    ProcessGroup::Options o;
    o.device = device;
    auto pg = new_process_group("auto", Store::hash(), 0, 1, o);
    ASSERT_EQ(pg->backend(), "nccl");
    auto batches = test::make_batches(kSteps, 1, kPerRank, {16});
    auto net = mlp_on(device), ref = mlp_on(device);
    DistributedDataParallel ddp(net, pg);
    ddp->register_comm_hook({}, gather_hook);
    const c10::StreamGuard on_side(test::side_stream(device));
    const auto before = pg->collectives_issued();
    train(ddp, ddp->parameters(), batches, 0, 1, device, /*late=*/true);
    EXPECT_GE(pg->collectives_issued() - before, kSteps);  // a bucket's all-gather every step
    train(ref, ref->parameters(), batches, 0, 1, device, /*late=*/true);
    test::expect_params_close(on_cpu(net->parameters()), on_cpu(ref->parameters()));
  }));
}

// Ranks sharing cuda:0, over shm staged through host memory or over nccl (each rank a host of
// its own to NCCL: Note [NCCL ranks sharing a GPU]; with nccl, a GPU each where there are
// enough); every test below runs on both.
class DdpGpuRanks : public test::GpuRanksTest {};

// Called from a non-default stream whose inputs arrive late: the collectives (on staged, the
// copies to the host) wait for that stream, the results come back on it.
TEST_P(DdpGpuRanks, FromASideStreamMatchOneProcess) {
  test::on_gpu_ranks(GetParam(), 2, [](int rank, std::shared_ptr<ProcessGroup> pg,
                                       at::Device device) {
    auto batches = test::make_batches(kSteps, 2, kPerRank, {16});
    auto net = mlp_on(device), ref = mlp_on(device);
    DistributedDataParallel ddp(net, pg);
    const c10::StreamGuard on_side(test::side_stream(device));
    train(ddp, ddp->parameters(), batches, rank, 2, device, /*late=*/true);
    train(ref, ref->parameters(), batches, 0, 1, device, /*late=*/true);
    test::expect_params_close(on_cpu(net->parameters()), on_cpu(ref->parameters()));
  });
}

// Two and three ranks against one process on the whole batch; the step times come from CUDA
// events (Note [Step times]) and are read once stats() asks.
TEST_P(DdpGpuRanks, RanksMatchOneProcessWithStepTimes) {
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    test::on_gpu_ranks(GetParam(), world, [world](int rank, std::shared_ptr<ProcessGroup> pg,
                                                  at::Device device) {
      auto batches = test::make_batches(kSteps, world, kPerRank, {16});
      auto net = mlp_on(device), ref = mlp_on(device);
      DistributedDataParallel ddp(net, pg);
      train(ddp, ddp->parameters(), batches, rank, world, device);
      train(ref, ref->parameters(), batches, 0, 1, device);
      test::expect_params_close(on_cpu(net->parameters()), on_cpu(ref->parameters()));
      const auto stats = ddp->stats();
      EXPECT_EQ(stats.iterations, kSteps);
      EXPECT_GT(stats.avg_backward_comm_ms, 0);
      EXPECT_GT(stats.backward_compute_ms, 0);
      EXPECT_GE(stats.avg_overlap_ms, 0);
    });
  }
}

// Every thread of a rank on cuda:1 works there (Note [Thread devices]): after DDP steps over
// nccl, with the stall inspector polling the works every 10 ms, the rank has no CUDA context on
// GPU 0, which a thread that queried an event without setting its device would have made.
TEST(DdpCuda, ARankOnTheSecondGpuMakesNoContextOnTheFirst) {
  if (test::gpus_seen_by_a_child() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  if (!cuda::built()) GTEST_SKIP() << "dpx built without CUDA (DPX_CUDA)";
  constexpr std::chrono::milliseconds kStallThreshold(40);  // a poll every 10 ms
  test::on_two_gpus([](int rank, std::shared_ptr<ProcessGroup> pg, at::Device device) {
    ASSERT_EQ(pg->backend(), "nccl");
    auto batches = test::make_batches(kSteps, 2, kPerRank, {16});
    auto net = mlp_on(device);
    DistributedDataParallel ddp(net, pg);
    train(ddp, ddp->parameters(), batches, rank, 2, device);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // more polls
    pg->barrier()->wait();
    const auto first = test::has_cuda_context(0);
    ASSERT_TRUE(first.has_value()) << "the driver did not say";
    EXPECT_EQ(*first, rank == 0) << "rank " << rank << " has a CUDA context on GPU 0";
    EXPECT_TRUE(test::has_cuda_context(rank).value_or(false));
  }, kStallThreshold);
}

// Each option DDP has on CPU, on two ranks. The compressing hooks round each
// step's gradients to 16 bits: their parameters match within 1e-3 after kSteps steps.
TEST_P(DdpGpuRanks, EachOptionMatchesOneProcess) {
  for (int variant = 0; variant < 6; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    test::on_gpu_ranks(GetParam(), 2, [&](int rank, std::shared_ptr<ProcessGroup> pg,
                                          at::Device device) {
      auto batches = test::make_batches(kSteps, 2, kPerRank, {16});
      auto net = mlp_on(device), ref = mlp_on(device);
      DistributedDataParallelOptions d;
      d.gradient_as_bucket_view = variant == 1;
      d.find_unused_parameters = variant == 2;
      d.static_graph = variant == 3;
      DistributedDataParallel ddp(net, pg, d);
      if (variant >= 4) {
        ddp->register_comm_hook({}, variant == 4 ? hooks::fp16_compress_hook
                                                 : hooks::bf16_compress_hook);
      }
      train(ddp, ddp->parameters(), batches, rank, 2, device);
      train(ref, ref->parameters(), batches, 0, 1, device);
      const double atol = variant >= 4 ? 1e-3 : 5e-5;
      test::expect_params_close(on_cpu(net->parameters()), on_cpu(ref->parameters()), 1e-5,
                                atol);
    });
  }
}

// no_sync on CUDA: odd steps accumulate locally, even steps synchronise the sum and step; one
// process accumulating the whole batches the same way gets the same parameters.
TEST_P(DdpGpuRanks, NoSyncAccumulates) {
  test::on_gpu_ranks(GetParam(), 2, [](int rank, std::shared_ptr<ProcessGroup> pg, at::Device device) {
    auto batches = test::make_batches(kSteps, 2, kPerRank, {16});
    auto net = mlp_on(device), ref = mlp_on(device);
    DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(ddp->parameters(), 0.1), ref_opt(ref->parameters(), 0.1);
    auto loss = [&](auto& model, const test::Batch& b) {
      return torch::nn::functional::cross_entropy(model->forward(b.x.to(device)),
                                                  b.y.to(device));
    };
    for (int s = 0; s < kSteps; ++s) {
      if (s % 2 == 0) {
        auto guard = ddp->no_sync();
        loss(ddp, test::slice(batches[s], rank, 2)).backward();
      } else {
        loss(ddp, test::slice(batches[s], rank, 2)).backward();
        opt.step();
        opt.zero_grad();
      }
      loss(ref, batches[s]).backward();
      if (s % 2 == 1) {
        ref_opt.step();
        ref_opt.zero_grad();
      }
    }
    test::expect_params_close(on_cpu(net->parameters()), on_cpu(ref->parameters()));
  });
}

// join on CUDA: rank 0 runs out after 2 of kSteps batches; both ranks finish, with the
// parameters of one process whose later steps see rank 1's share alone (divided by the initial
// world size, join's default).
TEST_P(DdpGpuRanks, JoinWithUnevenInputs) {
  test::on_gpu_ranks(GetParam(), 2, [](int rank, std::shared_ptr<ProcessGroup> pg, at::Device device) {
    const int steps[2] = {2, kSteps};
    auto batches = test::make_batches(kSteps, 2, kPerRank, {16});
    auto net = mlp_on(device);
    DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(ddp->parameters(), 0.1);
    ddp->join([&] {
      for (int s = 0; s < steps[rank]; ++s) {
        opt.zero_grad();
        auto b = test::slice(batches[s], rank, 2);
        torch::nn::functional::cross_entropy(ddp->forward(b.x.to(device)), b.y.to(device))
            .backward();
        opt.step();
      }
    });
    auto ref = mlp_on(device);
    torch::optim::SGD ref_opt(ref->parameters(), 0.1);
    for (int s = 0; s < kSteps; ++s) {
      ref_opt.zero_grad();
      for (int r = 0; r < 2; ++r) {
        if (s >= steps[r]) continue;
        auto b = test::slice(batches[s], r, 2);
        (torch::nn::functional::cross_entropy(ref->forward(b.x.to(device)), b.y.to(device)) / 2)
            .backward();
      }
      ref_opt.step();
    }
    test::expect_params_close(on_cpu(net->parameters()), on_cpu(ref->parameters()));
  });
}

// Once warmed up (buckets rebuilt), a DDP step over nccl makes the host wait for the GPU
// nowhere: forward, backward and the optimizer's step run under CUDA's sync-debug mode set to
// error (cuda::HostSyncsForbidden), which throws at any host synchronisation. With
// find_unused_parameters and every parameter used here the used map is reduced without being
// read back; under join with the default divisor the forward's all-reduce is not waited for
// (both as PyTorch's DDP).
TEST(DdpCuda, AStepOverNcclMakesNoHostSync) {
  if (test::gpus_seen_by_a_child() == 0) GTEST_SKIP() << "no CUDA device";
  if (!cuda::built()) GTEST_SKIP() << "dpx built without CUDA (DPX_CUDA)";
  constexpr int kWarm = 3, kChecked = 3;
  for (const std::string variant : {"default", "find_unused_parameters", "join"}) {
    SCOPED_TRACE(variant);
    test::on_gpu_ranks("nccl", 2, [&](int rank, std::shared_ptr<ProcessGroup> pg,
                                      at::Device device) {
      std::vector<test::Batch> batches;
      for (auto b : test::make_batches(kWarm + kChecked, 2, kPerRank, {16})) {
        b = test::slice(b, rank, 2);
        batches.push_back({b.x.to(device), b.y.to(device)});
      }
      auto net = mlp_on(device);
      DistributedDataParallelOptions d;
      d.find_unused_parameters = variant == "find_unused_parameters";
      DistributedDataParallel ddp(net, pg, d);
      torch::optim::SGD opt(ddp->parameters(), 0.1);
      auto steps = [&](int from, int to) {
        for (int s = from; s < to; ++s) {
          opt.zero_grad();
          torch::nn::functional::cross_entropy(ddp->forward(batches[s].x), batches[s].y)
              .backward();
          opt.step();
        }
      };
      auto all_steps = [&] {
        steps(0, kWarm);
        const cuda::HostSyncsForbidden no_syncs;
        steps(kWarm, kWarm + kChecked);
      };
      if (variant == "join") {
        ddp->join(all_steps);
      } else {
        all_steps();
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, DdpGpuRanks, ::testing::ValuesIn(test::gpu_sharing_backends()),
                         test::backend_param_name);

// A parameter on the meta device, which any machine has.
struct MetaImpl : torch::nn::Module {
  MetaImpl() { weight = register_parameter("weight", torch::empty({4, 4}, at::kMeta)); }
  torch::Tensor forward(torch::Tensor x) { return x.matmul(weight); }
  torch::Tensor weight;
};
TORCH_MODULE(Meta);

// Runs anywhere: a module whose parameters are not on the group's device.
TEST(DdpDevices, ParametersOffTheGroupsDeviceAreAClearError) {
  auto pg = new_process_group("gloo", Store::hash(), 0, 1);
  Meta net;
  try {
    DistributedDataParallel ddp(net, pg);
    ADD_FAILURE() << "DDP accepted parameters on another device than its group's";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("parameter weight is on meta but the process "
                                               "group works on cpu; move the module there"));
  }
}

}  // namespace
}  // namespace dpx::ddp_cuda_test
