// The toolkit on a CUDA group: two ranks sharing cuda:0 (shm staged through host memory, and
// nccl), each result checked against the same computation on the CPU. These are the paths that
// once handed CPU tensors to a CUDA group (SyncBatchNorm's channel check, join's
// early-termination vote, ZeRO's consolidation). Skipped without a GPU.
#include <torch/torch.h>

#include "multiproc/cuda_ranks.h"
#include "dpx/algorithms/powersgd.h"
#include "dpx/algorithms/sync_batch_norm.h"
#include "dpx/algorithms/zero_redundancy_optimizer.h"
#include "support/expect_throws.h"

namespace dpx {
namespace {

using test::on_cpu;

// Each test runs on two ranks sharing cuda:0 over both backends that can (gpu_sharing_backends).
class ToolkitCuda : public test::GpuRanksTest {};

// Two steps of SyncBatchNorm on uneven batches (4 and 3 samples) against BatchNorm2d on the
// whole batch on the CPU: outputs, input gradients, the summed weight and bias gradients and
// the running statistics.
TEST_P(ToolkitCuda, SyncBatchNormMatchesBatchNormOnTheCpu) {
  test::on_gpu_ranks(GetParam(), 2, [](int rank, std::shared_ptr<ProcessGroup> pg, at::Device device) {
    constexpr int64_t kChannels = 3;
    const int64_t start = rank == 0 ? 0 : 4, rows = rank == 0 ? 4 : 3;
    torch::manual_seed(3);
    const auto x = torch::randn({7, kChannels, 3, 2}, torch::kDouble) * 3 + 1;
    const auto g = torch::randn({7, kChannels, 3, 2}, torch::kDouble);
    torch::nn::BatchNorm2d bn(kChannels);
    bn->to(torch::kDouble);
    auto xa = x.clone().requires_grad_(true);
    torch::Tensor expected;
    SyncBatchNorm sbn(SyncBatchNormOptions(kChannels), pg);
    sbn->to(device, torch::kDouble);
    auto xr = x.narrow(0, start, rows).to(device).requires_grad_(true);
    torch::Tensor out;
    for (int step = 0; step < 2; ++step) {
      expected = bn(xa);
      (expected * g).sum().backward();
      out = sbn(xr);
      (out * g.narrow(0, start, rows).to(device)).sum().backward();
    }
    auto close = [](const torch::Tensor& got, const torch::Tensor& want) {
      return torch::allclose(got.cpu(), want, 1e-9, 1e-10);
    };
    EXPECT_TRUE(close(out.detach(), expected.detach().narrow(0, start, rows)));
    EXPECT_TRUE(close(xr.grad(), xa.grad().narrow(0, start, rows)));
    auto weight_grad = sbn->weight.grad().clone(), bias_grad = sbn->bias.grad().clone();
    pg->allreduce(weight_grad)->wait();
    pg->allreduce(bias_grad)->wait();
    EXPECT_TRUE(close(weight_grad, bn->weight.grad()));
    EXPECT_TRUE(close(bias_grad, bn->bias.grad()));
    EXPECT_TRUE(close(sbn->running_mean, bn->running_mean));
    EXPECT_TRUE(close(sbn->running_var, bn->running_var));
  });
}

// ZeRO with Adam over the GPU group against Adam unsharded on the CPU, then its state
// consolidated on rank 0 (an all-gather and broadcasts of host bytes through the group).
TEST_P(ToolkitCuda, ZeroMatchesTheUnshardedOptimizerAndConsolidates) {
  test::on_gpu_ranks(GetParam(), 2, [](int rank, std::shared_ptr<ProcessGroup> pg, at::Device device) {
    torch::manual_seed(11);
    torch::nn::Sequential net(torch::nn::Linear(10, 16), torch::nn::Linear(16, 3));
    std::vector<torch::Tensor> cpu_params, gpu_params;
    for (const auto& p : net->parameters()) {
      cpu_params.push_back(p.detach().clone().requires_grad_(true));
      gpu_params.push_back(p.detach().to(device).requires_grad_(true));
    }
    auto adam = optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions(1e-2));
    torch::optim::Adam ref(cpu_params, torch::optim::AdamOptions(1e-2));
    ZeroRedundancyOptimizer zero(gpu_params, pg, adam);
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < cpu_params.size(); ++i) {
        auto grad = torch::sin(cpu_params[i].detach() * (step + 1) + static_cast<double>(i));
        cpu_params[i].mutable_grad() = grad;
        gpu_params[i].mutable_grad() = grad.to(device);
      }
      ref.step();
      zero.step();
    }
    test::expect_params_close(on_cpu(gpu_params), cpu_params, 1e-5, 1e-6);
    zero.consolidate_state_dict(0);
    if (rank == 0) {
      torch::serialize::OutputArchive archive;
      zero.save(archive);
    } else {
      torch::serialize::OutputArchive archive;
      EXPECT_THAT(test::expect_throws<c10::Error>([&] { zero.save(archive); }),
                  ::testing::HasSubstr("this rank holds no consolidated state"));
    }
  });
}

// The PowerSGD hook on the GPU group against the same hook on a CPU group of the same ranks:
// the same low-rank factors (drawn on the CPU), so the same parameters.
TEST_P(ToolkitCuda, PowerSgdMatchesTheCpuGroup) {
  test::StoreServer cpu_server;
  test::on_gpu_ranks(GetParam(), 2, [&](int rank, std::shared_ptr<ProcessGroup> gpu_pg, at::Device device) {
    auto cpu_pg = new_process_group("shm", cpu_server.client(), rank, 2);
    auto batches = test::make_batches(4, 2, 8, {16});
    auto train = [&](std::shared_ptr<ProcessGroup> pg, at::Device on) {
      auto net = test::mlp_on(on);
      DistributedDataParallel ddp(net, pg);
      hooks::PowerSGDOptions po;
      po.matrix_approximation_rank = 2;
      po.start_powersgd_iter = 2;
      ddp->register_comm_hook(std::make_shared<hooks::PowerSGDState>(po), hooks::powersgd_hook);
      torch::optim::SGD opt(ddp->parameters(), 0.1);
      for (const auto& b : batches) {
        auto part = test::slice(b, rank, 2);
        opt.zero_grad();
        torch::nn::functional::cross_entropy(ddp->forward(part.x.to(on)), part.y.to(on))
            .backward();
        opt.step();
      }
      return on_cpu(net->parameters());
    };
    // GPU and CPU orthogonalise in different orders: close, not equal.
    test::expect_params_close(train(gpu_pg, device), train(cpu_pg, at::kCPU), 1e-3, 1e-4);
  });
}

// Sparse embedding gradients on the GPU group against one process on the whole batch.
TEST_P(ToolkitCuda, SparseGradientsMatchOneProcess) {
  test::on_gpu_ranks(GetParam(), 2, [](int rank, std::shared_ptr<ProcessGroup> pg, at::Device device) {
    auto make = [&] {
      torch::manual_seed(5);
      auto emb = torch::nn::Embedding(torch::nn::EmbeddingOptions(40, 8).sparse(true));
      emb->to(device);
      return emb;
    };
    auto emb = make(), ref = make();
    DistributedDataParallel ddp(emb, pg);
    torch::optim::SGD opt(ddp->parameters(), 0.5), ref_opt(ref->parameters(), 0.5);
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(100 + step);
      auto ids = torch::randint(40, {2, 6, 3}).to(device);  // [rank, sample, token]
      auto target = torch::randn({2, 6, 8}).to(device);
      opt.zero_grad();
      ref_opt.zero_grad();
      (ddp->forward(ids[rank]).sum(1) - target[rank]).pow(2).mean().backward();
      opt.step();
      for (int r = 0; r < 2; ++r) {
        ((ref->forward(ids[r]).sum(1) - target[r]).pow(2).mean() / 2).backward();
      }
      ref_opt.step();
    }
    test::expect_params_close(on_cpu(emb->parameters()), on_cpu(ref->parameters()));
  });
}

// join(throw_on_early_termination) on the GPU group: the vote is a host tensor through the
// group's device; both ranks stop, each with its own message.
TEST_P(ToolkitCuda, JoinThrowOnEarlyTerminationStopsBothRanks) {
  test::on_gpu_ranks(GetParam(), 2, [](int rank, std::shared_ptr<ProcessGroup> pg, at::Device device) {
    auto batches = test::make_batches(4, 2, 8, {16});
    auto net = test::mlp_on(device);
    DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(ddp->parameters(), 0.1);
    JoinOptions jo;
    jo.throw_on_early_termination = true;
    const int steps[2] = {2, 4};
    int done = 0;
    const auto error = test::expect_throws<DistributedError>([&] {
      ddp->join(
          [&] {
            for (int s = 0; s < steps[rank]; ++s, ++done) {
              opt.zero_grad();
              auto b = test::slice(batches[s], rank, 2);
              torch::nn::functional::cross_entropy(ddp->forward(b.x.to(device)), b.y.to(device))
                  .backward();
              opt.step();
            }
          },
          jo);
    });
    EXPECT_EQ(done, 2);
    EXPECT_THAT(error, ::testing::HasSubstr(rank == 0 ? "Rank 0 exhausted all inputs."
                                                      : "Detected at least one rank that "
                                                        "exhausted inputs."));
  });
}

INSTANTIATE_TEST_SUITE_P(OnOneGpu, ToolkitCuda, ::testing::ValuesIn(test::gpu_sharing_backends()),
                         test::backend_param_name);

}  // namespace
}  // namespace dpx
