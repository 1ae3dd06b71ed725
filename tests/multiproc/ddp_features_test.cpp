// no_sync, comm hooks, evaluation forwards, join and statistics, each against a local
// single-process reference computed by every rank.
#include <torch/torch.h>
#include <unistd.h>

#include "multiproc/ddp_models.h"
#include "dpx/dpx.h"
#include "dpx/algorithms/sync_batch_norm.h"
#include "support/expect_throws.h"
#include "support/harness.h"

namespace dpx::ddp_features_test {
namespace {

constexpr int kWorld = 2;
constexpr int kPerRank = 8;

torch::Tensor mlp_loss(test::Mlp& m, const test::Batch& b) {
  return torch::nn::functional::cross_entropy(m->forward(b.x), b.y);
}

// The gradients DDP must produce: those of the mean of every rank's loss.
std::vector<torch::Tensor> reference_grads(const std::vector<test::Batch>& batches) {
  torch::manual_seed(5);
  test::Mlp ref;
  for (const auto& batch : batches) {
    for (int r = 0; r < kWorld; ++r) (mlp_loss(ref, test::slice(batch, r, kWorld)) / kWorld).backward();
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : ref->parameters()) out.push_back(p.grad().clone());
  return out;
}

std::vector<torch::Tensor> grads_of(test::Mlp& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m->parameters()) out.push_back(p.grad().clone());
  return out;
}

TEST(DdpNoSync, AccumulatesLocallyThenSynchronisesTheSum) {
  test::on_each_backend(kWorld, [](int rank, auto pg) {
    auto batches = test::make_batches(3, kWorld, kPerRank, {16});
    torch::manual_seed(5);
    test::Mlp net;
    DistributedDataParallel ddp(net, pg);
    {
      auto guard = ddp->no_sync();
      for (int s = 0; s < 2; ++s) {
        auto b = test::slice(batches[s], rank, kWorld);
        torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
      }
      // Still local: this rank's own gradient sum, not the average.
      torch::manual_seed(5);
      test::Mlp local;
      for (int s = 0; s < 2; ++s) mlp_loss(local, test::slice(batches[s], rank, kWorld)).backward();
      test::expect_params_close(grads_of(net), grads_of(local), 1e-6, 1e-6);
    }
    auto b = test::slice(batches[2], rank, kWorld);
    torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
    // Every rank's three local gradients, summed, divided by the world size once.
    test::expect_params_close(grads_of(net), reference_grads(batches));
  });
}

struct HookCase {
  std::string name;
  CommHook hook;
  double atol;
};

void PrintTo(const HookCase& c, std::ostream* os) { *os << c.name; }

class CommHooks : public ::testing::TestWithParam<HookCase> {};

// With one bucket and with one per layer, so that the results of several hooked buckets are
// written back one by one while later buckets are still pending.
TEST_P(CommHooks, GradientsWithinPrecision) {
  const auto hc = GetParam();
  for (double cap : {25.0, 0.0005}) {
  SCOPED_TRACE("bucket caps " + std::to_string(cap) + " MiB");
  test::on_each_backend(kWorld, [&](int rank, auto pg) {
    auto batches = test::make_batches(2, kWorld, kPerRank, {16});
    torch::manual_seed(5);
    test::Mlp net;
    DistributedDataParallelOptions options;
    options.bucket_cap_mb = options.first_bucket_cap_mb = cap;
    DistributedDataParallel ddp(net, pg, options);
    // Tiny caps: 4 buckets in registration order, 3 after the rebuild in gradient order.
    const auto first_layout = ddp->stats().bucket_sizes_bytes.size();
    EXPECT_EQ(first_layout, cap < 1 ? 4u : 1u);
    int calls = 0;
    ddp->register_comm_hook({}, [&](std::any& state, GradBucket& bucket) {
      ++calls;
      EXPECT_EQ(bucket.parameters.size(), bucket.gradients.size());
      return hc.hook(state, bucket);
    });
    for (int s = 0; s < 2; ++s) {
      net->zero_grad();
      auto b = test::slice(batches[s], rank, kWorld);
      torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
      test::expect_params_close(grads_of(net), reference_grads({batches[s]}), 1e-5, hc.atol);
    }
    const auto rebuilt_layout = ddp->stats().bucket_sizes_bytes.size();
    EXPECT_EQ(rebuilt_layout, cap < 1 ? 3u : 1u);
    EXPECT_EQ(calls, static_cast<int>(first_layout + rebuilt_layout));  // once per bucket
  });
  }
}

INSTANTIATE_TEST_SUITE_P(
    BuiltIns, CommHooks,
    ::testing::Values(HookCase{"allreduce", hooks::allreduce_hook, 1e-6},
                      HookCase{"fp16", hooks::fp16_compress_hook, 1e-3},
                      HookCase{"bf16", hooks::bf16_compress_hook, 1e-2}),
    [](const auto& info) { return info.param.name; });

// The compressing hooks really send fp16/bf16: the result is exactly the average of the
// wire-rounded, pre-divided local gradients (Gloo and shm round each sum once), which differs
// from the float32 average.
TEST(CommHooks, CompressedHooksGiveTheWireRoundedAverage) {
  for (auto wire : {at::kHalf, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(wire));
    test::on_each_backend(kWorld, [&](int rank, auto pg) {
      auto batch = test::make_batches(1, kWorld, kPerRank, {16})[0];
      torch::manual_seed(5);
      test::Mlp net;
      DistributedDataParallel ddp(net, pg);
      ddp->register_comm_hook({}, wire == at::kHalf ? hooks::fp16_compress_hook
                                                    : hooks::bf16_compress_hook);
      auto b = test::slice(batch, rank, kWorld);
      torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
      std::vector<std::vector<torch::Tensor>> local(kWorld);  // each rank's own gradients
      for (int r = 0; r < kWorld; ++r) {
        torch::manual_seed(5);
        test::Mlp m;
        mlp_loss(m, test::slice(batch, r, kWorld)).backward();
        local[r] = grads_of(m);
      }
      const auto got = grads_of(net);
      bool differs_from_fp32 = false;
      for (std::size_t i = 0; i < got.size(); ++i) {
        auto rounded = local[0][i].to(wire).div_(kWorld).add(local[1][i].to(wire).div_(kWorld));
        EXPECT_TRUE(got[i].equal(rounded.to(at::kFloat))) << "parameter " << i;
        differs_from_fp32 |= !got[i].equal((local[0][i] + local[1][i]) / kWorld);
      }
      EXPECT_TRUE(differs_from_fp32);
    });
  }
}

TEST(DdpEval, ForwardsWithoutBackwardDoNotDisturbTraining) {
  test::on_each_backend(kWorld, [](int rank, auto pg) {
    auto batches = test::make_batches(3, kWorld, kPerRank, {16});
    torch::manual_seed(5);
    test::Mlp net;
    DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(ddp->parameters(), 0.1);
    torch::manual_seed(5);
    test::Mlp ref;
    torch::optim::SGD ref_opt(ref->parameters(), 0.1);
    for (int s = 0; s < 3; ++s) {
      auto b = test::slice(batches[s], rank, kWorld);
      {
        torch::NoGradGuard no_grad;  // evaluation: only this rank runs it, no communication
        if (rank == 0) ddp->forward(b.x);
      }
      ddp->eval();
      ddp->forward(b.x);  // a forward with grad enabled but no backward
      ddp->train();
      opt.zero_grad();
      torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
      opt.step();
      ref_opt.zero_grad();
      mlp_loss(ref, batches[s]).backward();
      ref_opt.step();
    }
    std::vector<torch::Tensor> got, want;
    for (const auto& p : net->parameters()) got.push_back(p.detach());
    for (const auto& p : ref->parameters()) want.push_back(p.detach());
    test::expect_params_close(got, want);
  });
}

// DistributedDataParallel is a module holder like TORCH_MODULE's, its module the wrapped one's
// parent: the names, modes and call syntax of any LibTorch module.
TEST(DdpModule, IsAModuleHolderOfAModuleHoldingTheWrappedOne) {
  test::on_each_backend(kWorld, [](int rank, auto pg) {
    test::Mlp net;
    DistributedDataParallel ddp(net, pg);
    static_assert(std::is_base_of_v<
                  torch::nn::ModuleHolder<DistributedDataParallelImpl<test::MlpImpl>>,
                  decltype(ddp)>);
    std::vector<std::string> want;
    for (const auto& name : net->named_parameters().keys()) want.push_back("module." + name);
    EXPECT_EQ(ddp->named_parameters().keys(), want);
    EXPECT_EQ(ddp->module(), net.ptr());
    ddp->eval();
    EXPECT_FALSE(net->is_training());
    ddp->train();
    EXPECT_TRUE(net->is_training());
    torch::NoGradGuard no_grad;  // forwards without communication
    auto x = torch::randn({4, 16});
    EXPECT_TRUE(torch::equal(ddp(x), net->forward(x)));
    auto copy = ddp;  // a holder: copies share one DDP
    EXPECT_EQ(copy.get(), ddp.get());

    // torch::save of the holder writes "module.*", which loads into another DDP's module.
    const std::string path = ::testing::TempDir() + "/ddp_holder_" + std::to_string(rank) +
                             "_" + std::to_string(::getpid()) + ".pt";
    torch::save(ddp, path);
    test::Mlp other;  // other initial values, made rank 0's by the constructor's broadcast
    DistributedDataParallel loaded(other, pg);
    torch::load(loaded, path);
    std::remove(path.c_str());
    for (const auto& item : net->named_parameters()) {
      EXPECT_TRUE(torch::equal(other->named_parameters()[item.key()], item.value())) << item.key();
    }
  });
}

// LibTorch's torch::load gives each parameter the file's storage (set_), which makes autograd
// forget the gradient accumulator DDP hooked; the gradients after it must still be averaged
// (Note [Replaced gradient accumulators]).
TEST(DdpLoad, GradientsAfterTorchLoadAreStillAveraged) {
  test::on_each_backend(kWorld, [](int rank, auto pg) {
    auto batches = test::make_batches(1, kWorld, kPerRank, {16});
    torch::manual_seed(5);
    test::Mlp net;
    DistributedDataParallel ddp(net, pg);
    const std::string path = ::testing::TempDir() + "/ddp_reload_" + std::to_string(rank) +
                             "_" + std::to_string(::getpid()) + ".pt";
    torch::save(net, path);
    torch::load(net, path);  // the same values, in the file's storage
    std::remove(path.c_str());
    auto b = test::slice(batches[0], rank, kWorld);
    torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
    test::expect_params_close(grads_of(net), reference_grads(batches), 1e-6, 1e-6);
  });
}

class Join : public ::testing::TestWithParam<std::tuple<bool, int>> {};

// Rank 0 has 3 batches (or none), rank 1 has 5: both finish, and end with the parameters the
// reference reaches when the missing rank contributes nothing to the later steps.
TEST_P(Join, UnevenInputsFinishWithTheLastRanksParameters) {
  const auto [by_initial, rank0_steps] = GetParam();
  test::on_each_backend(kWorld, [&, by_initial = by_initial, rank0_steps = rank0_steps](int rank, auto pg) {
    const int steps[kWorld] = {rank0_steps, 5};
    auto batches = test::make_batches(5, kWorld, kPerRank, {16});
    torch::manual_seed(5);
    test::Mlp net;
    DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(ddp->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    JoinOptions jo;
    jo.divide_by_initial_world_size = by_initial;
    ddp->join([&] {
      for (int s = 0; s < steps[rank]; ++s) {
        opt.zero_grad();
        auto b = test::slice(batches[s], rank, kWorld);
        torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
        opt.step();
      }
    }, jo);
    torch::manual_seed(5);
    test::Mlp ref;
    torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < 5; ++s) {
      ref_opt.zero_grad();
      const int active = (s < steps[0]) + (s < steps[1]);
      const double divisor = by_initial ? kWorld : active;
      for (int r = 0; r < kWorld; ++r) {
        if (s < steps[r]) (mlp_loss(ref, test::slice(batches[s], r, kWorld)) / divisor).backward();
      }
      ref_opt.step();
    }
    std::vector<torch::Tensor> got, want;
    for (const auto& p : net->parameters()) got.push_back(p.detach());
    for (const auto& p : ref->parameters()) want.push_back(p.detach());
    test::expect_params_close(got, want);
    // Training goes on normally after join.
    auto b = test::slice(batches[0], rank, kWorld);
    torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
  });
}

INSTANTIATE_TEST_SUITE_P(DivideByInitialWorldSizeAndRank0Steps, Join,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(3, 0)));

// throw_on_early_termination: rank 0 has 2 batches, rank 1 has 4. Both take the first two steps
// together; then rank 0 throws from join() and rank 1 from its third forward, with PyTorch's
// messages. With even inputs nothing is thrown.
TEST(Join, ThrowOnEarlyTerminationStopsEveryRank) {
  test::on_each_backend(kWorld, [](int rank, auto pg) {
    auto batches = test::make_batches(4, kWorld, kPerRank, {16});
    torch::manual_seed(5);
    test::Mlp net;
    DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(ddp->parameters(), 0.1);
    JoinOptions jo;
    jo.throw_on_early_termination = true;
    auto train = [&](int steps, int& done) {
      for (int s = 0; s < steps; ++s) {
        opt.zero_grad();
        auto b = test::slice(batches[s], rank, kWorld);
        torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
        opt.step();
        ++done;
      }
    };
    int done = 0;
    const int steps[kWorld] = {2, 4};
    const auto error = test::expect_throws<DistributedError>([&] {
      ddp->join([&] { train(steps[rank], done); }, jo);
    });
    EXPECT_EQ(done, 2);
    EXPECT_THAT(error, ::testing::HasSubstr(
                           rank == 0 ? "Rank 0 exhausted all inputs."
                                     : "Detected at least one rank that exhausted inputs. "
                                       "Throwing across all ranks."));
    done = 0;
    ddp->join([&] { train(2, done); }, jo);
    EXPECT_EQ(done, 2);
  });
}

// Gradient accumulation inside join: no_sync micro-steps communicate nothing, so the joined
// rank only shadows the synchronised ones.
TEST(JoinWithNoSync, AccumulationStepsDoNotConfuseTheShadow) {
  test::on_each_backend(kWorld, [](int rank, auto pg) {
    const int steps[kWorld] = {2, 4};
    auto batches = test::make_batches(8, kWorld, kPerRank, {16});  // 2 micro-batches per step
    torch::manual_seed(5);
    test::Mlp net;
    DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(ddp->parameters(), 0.1);
    auto micro = [&](int s, int m) {
      auto b = test::slice(batches[2 * s + m], rank, kWorld);
      torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
    };
    ddp->join([&] {
      for (int s = 0; s < steps[rank]; ++s) {
        opt.zero_grad();
        {
          auto guard = ddp->no_sync();
          micro(s, 0);
        }
        micro(s, 1);
        opt.step();
      }
    });
    torch::manual_seed(5);
    test::Mlp ref;
    torch::optim::SGD ref_opt(ref->parameters(), 0.1);
    for (int s = 0; s < 4; ++s) {
      ref_opt.zero_grad();
      for (int r = 0; r < kWorld; ++r) {
        if (s >= steps[r]) continue;
        for (int m = 0; m < 2; ++m) {
          (mlp_loss(ref, test::slice(batches[2 * s + m], r, kWorld)) / kWorld).backward();
        }
      }
      ref_opt.step();
    }
    std::vector<torch::Tensor> got, want;
    for (const auto& p : net->parameters()) got.push_back(p.detach());
    for (const auto& p : ref->parameters()) want.push_back(p.detach());
    test::expect_params_close(got, want);
  });
}

// SyncBatchNorm inside DDP: its collectives in forward and backward interleave with DDP's
// bucket all-reduces, and training follows one BatchNorm over both ranks' batches.
TEST(DdpSyncBatchNorm, TrainsAsBatchNormOverTheWholeBatch) {
  test::on_each_backend(kWorld, [](int rank, auto pg) {
    auto batches = test::make_batches(3, kWorld, kPerRank, {16});
    auto make = [] {
      torch::manual_seed(9);
      return torch::nn::Sequential(torch::nn::Linear(16, 8), torch::nn::BatchNorm1d(8),
                                   torch::nn::ReLU(), torch::nn::Linear(8, 4));
    };
    auto net = make();
    convert_sync_batchnorm(net.ptr(), pg);
    DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(ddp->parameters(), 0.1);
    auto ref = make();
    torch::optim::SGD ref_opt(ref->parameters(), 0.1);
    for (const auto& batch : batches) {
      opt.zero_grad();
      auto b = test::slice(batch, rank, kWorld);
      torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
      opt.step();
      ref_opt.zero_grad();
      auto out = ref->forward(batch.x);
      torch::Tensor loss = torch::zeros({});
      for (int r = 0; r < kWorld; ++r) {
        auto rows = out.narrow(0, r * kPerRank, kPerRank);
        loss = loss + torch::nn::functional::cross_entropy(rows, batch.y.narrow(0, r * kPerRank,
                                                                                  kPerRank));
      }
      (loss / kWorld).backward();
      ref_opt.step();
    }
    std::vector<torch::Tensor> got, want;
    for (const auto& p : net->parameters()) got.push_back(p.detach());
    for (const auto& p : ref->parameters()) want.push_back(p.detach());
    test::expect_params_close(got, want);
    auto* bn = net[1]->template as<SyncBatchNormImpl>();
    ASSERT_NE(bn, nullptr);
    EXPECT_TRUE(torch::allclose(bn->running_var, ref[1]->template as<torch::nn::BatchNorm1d>()->running_var,
                                1e-5, 1e-6));
  });
}

// bfloat16 gradients averaged over 3 ranks: each rank's gradient times 1/3 taken in float (as
// PyTorch's reducer does), not bf16(1/3) = 0.33398, which made every average 0.2% too large. With
// 4096 random gradients, equal on every rank, the mean ratio to the gradient is 1 within bf16's
// unbiased rounding (0.02%), far from 1.002.
TEST(DdpBfloat16, AveragesAreUnbiased) {
  test::on_each_backend(3, [](int rank, auto pg) {
    torch::manual_seed(3);
    auto lin = torch::nn::Linear(torch::nn::LinearOptions(64, 64).bias(false));
    lin->to(torch::kBFloat16);
    DistributedDataParallel ddp(lin, pg);
    torch::manual_seed(11);  // the same input on every rank
    auto x = torch::randn({8, 64}).to(torch::kBFloat16);
    ddp->forward(x).to(torch::kFloat).pow(2).sum().backward();
    auto local = torch::nn::Linear(torch::nn::LinearOptions(64, 64).bias(false));
    local->to(torch::kBFloat16);
    {
      torch::NoGradGuard no_grad;
      local->weight.copy_(lin->weight);
    }
    local->forward(x).to(torch::kFloat).pow(2).sum().backward();
    const auto ratio = lin->weight.grad().to(torch::kDouble) / local->weight.grad().to(torch::kDouble);
    EXPECT_NEAR(ratio.mean().item<double>(), 1.0, 2e-4) << "rank " << rank;
  });
}

TEST(DdpStats, BucketsIterationsAndTimes) {
  test::on_each_backend(kWorld, [](int rank, auto pg) {
    torch::manual_seed(5);
    test::Mlp net;
    DistributedDataParallelOptions o;
    o.bucket_cap_mb = 0.004;  // 4 KiB: fc2 (32x32 floats) fills a bucket by itself
    DistributedDataParallel ddp(net, pg, o);
    auto batches = test::make_batches(3, kWorld, kPerRank, {16});
    for (const auto& batch : batches) {
      auto b = test::slice(batch, rank, kWorld);
      torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
    }
    auto s = ddp->stats();
    EXPECT_EQ(s.iterations, 3);
    EXPECT_TRUE(s.buckets_rebuilt);
    std::int64_t total = 0;
    for (auto b : s.bucket_sizes_bytes) total += b;
    std::int64_t params = 0;
    for (const auto& p : net->parameters()) params += p.numel() * 4;
    EXPECT_EQ(total, params);
    EXPECT_EQ(s.bucket_sizes_bytes.size(), s.bucket_num_parameters.size());
    EXPECT_GT(s.avg_forward_ms, 0);
    EXPECT_GT(s.avg_backward_comm_ms, 0);
    EXPECT_GE(s.avg_backward_comm_ms, s.avg_exposed_comm_ms);
    EXPECT_GE(s.avg_overlap_ms, 0);
    EXPECT_LE(s.avg_overlap_ms, s.avg_backward_comm_ms);
    EXPECT_GT(s.forward_ms, 0);
    EXPECT_GT(s.backward_comm_ms, 0);
    EXPECT_EQ(s.unused_parameters, 0);
    EXPECT_EQ(s.rank, rank);
    EXPECT_EQ(s.world_size, kWorld);
    EXPECT_EQ(s.backend, pg->backend());
    EXPECT_EQ(s.num_parameter_tensors, 6);
    EXPECT_EQ(s.total_parameter_size_bytes, params);
    EXPECT_EQ(s.bucket_cap_bytes, 4194);  // 0.004 MiB, as DDP rounds it
  });
}

}  // namespace
}  // namespace dpx::ddp_features_test
