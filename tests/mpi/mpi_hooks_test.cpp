// DDP's comm hooks (fp16 and bf16 compression, PowerSGD) and join with uneven inputs on the mpi
// backend, one process per rank under mpirun, at whatever world size mpirun started: the checks
// that tests/multiproc/ddp_features_test.cpp and the conformance suite make on shm and gloo.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dpx/algorithms/powersgd.h"
#include "mpi/mpi_group.h"
#include "multiproc/ddp_models.h"
#include "support/hook_parity.h"

namespace dpx::mpi_test {
namespace {

constexpr int kPerRank = 8;

torch::Tensor mlp_loss(test::Mlp& m, const test::Batch& b) {
  return torch::nn::functional::cross_entropy(m->forward(b.x), b.y);
}

std::vector<torch::Tensor> grads_of(test::Mlp& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m->parameters()) out.push_back(p.grad().clone());
  return out;
}

std::vector<torch::Tensor> params_of(test::Mlp& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m->parameters()) out.push_back(p.detach());
  return out;
}

struct Wire {
  at::ScalarType dtype;
  CommHook hook;
  double atol;  // of the average, as tests/multiproc/ddp_features_test.cpp allows
};

// One step, with one bucket and with one per layer: the gradients are the one-process average
// within the wire's precision. With two ranks the average is exactly that of the wire-rounded,
// pre-divided local gradients (one sum, rounded once, as on gloo and shm), which differs from the
// float32 average: the hook really sent fp16/bf16.
TEST(MpiCommHooks, CompressingHooksAverageInTheWiresPrecision) {
  auto pg = mpi_group();
  const int w = pg->size();
  const auto batch = test::make_batches(1, w, kPerRank, {16})[0];
  std::vector<std::vector<torch::Tensor>> local(w);  // each rank's own gradients
  for (int r = 0; r < w; ++r) {
    torch::manual_seed(5);
    test::Mlp m;
    mlp_loss(m, test::slice(batch, r, w)).backward();
    local[r] = grads_of(m);
  }
  for (const auto& wire : {Wire{at::kHalf, hooks::fp16_compress_hook, 1e-3},
                           Wire{at::kBFloat16, hooks::bf16_compress_hook, 1e-2}}) {
    for (double cap : {25.0, 0.0005}) {
      SCOPED_TRACE(std::string(c10::toString(wire.dtype)) + ", bucket cap " + std::to_string(cap));
      torch::manual_seed(5);
      test::Mlp net;
      DistributedDataParallelOptions options;
      options.bucket_cap_mb = options.first_bucket_cap_mb = cap;
      DistributedDataParallel ddp(net, pg, options);
      ddp->register_comm_hook({}, wire.hook);
      auto b = test::slice(batch, pg->rank(), w);
      torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
      const auto got = grads_of(net);
      std::vector<torch::Tensor> average;
      for (std::size_t i = 0; i < got.size(); ++i) {
        auto sum = torch::zeros_like(local[0][i]);
        for (int r = 0; r < w; ++r) sum += local[r][i];
        average.push_back(sum / w);
      }
      test::expect_params_close(got, average, 1e-5, wire.atol);
      if (w != 2) continue;  // more sums: the rounding depends on MPI's reduction order
      bool differs_from_fp32 = false;
      for (std::size_t i = 0; i < got.size(); ++i) {
        auto rounded = local[0][i].to(wire.dtype).div_(w).add(local[1][i].to(wire.dtype).div_(w));
        EXPECT_TRUE(got[i].equal(rounded.to(at::kFloat))) << "parameter " << i;
        differs_from_fp32 |= !got[i].equal(average[i]);
      }
      EXPECT_TRUE(differs_from_fp32);
    }
  }
}

// _test_ddp_hook_parity with PowerSGD (rank-1 approximation, from iteration 2, with and without
// warm start): the ranks' gradients here are rank-1, so PowerSGD gives the exact mean.
TEST(MpiCommHooks, PowerSgdHookParity) {
  auto pg = mpi_group();
  for (bool warm_start : {true, false}) {
    SCOPED_TRACE(warm_start ? "warm start" : "no warm start");
    test::hook_parity(pg, at::kCPU, [&](DdpBase& d) {
      hooks::PowerSGDOptions o;
      o.matrix_approximation_rank = 1;
      o.start_powersgd_iter = 2;
      o.warm_start = warm_start;
      d.register_comm_hook(std::make_shared<hooks::PowerSGDState>(o), hooks::powersgd_hook);
    });
  }
}

// Rank r has 2 + r batches (rank 0 none in the second round): every rank finishes, with the
// parameters of a reference that, at each step, sums the losses of the ranks that still have
// data, divided by the initial world size or by their number.
TEST(MpiJoin, UnevenInputsFinishWithTheLastRanksParameters) {
  auto pg = mpi_group();
  const int w = pg->size();
  const int rank = pg->rank();
  for (bool rank0_idle : {false, true}) {
    for (bool by_initial : {true, false}) {
      SCOPED_TRACE(std::string(rank0_idle ? "rank 0 idle, " : "") +
                   (by_initial ? "divided by the initial world size" : "by the active ranks"));
      auto steps = [&](int r) { return r == 0 && rank0_idle ? 0 : 2 + r; };
      const int total = steps(w - 1);
      auto batches = test::make_batches(total, w, kPerRank, {16});
      torch::manual_seed(5);
      test::Mlp net;
      DistributedDataParallel ddp(net, pg);
      torch::optim::SGD opt(ddp->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      JoinOptions jo;
      jo.divide_by_initial_world_size = by_initial;
      ddp->join([&] {
        for (int s = 0; s < steps(rank); ++s) {
          opt.zero_grad();
          auto b = test::slice(batches[s], rank, w);
          torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
          opt.step();
        }
      }, jo);
      torch::manual_seed(5);
      test::Mlp ref;
      torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      for (int s = 0; s < total; ++s) {
        ref_opt.zero_grad();
        int active = 0;
        for (int r = 0; r < w; ++r) active += s < steps(r);
        const double divisor = by_initial ? w : active;
        for (int r = 0; r < w; ++r) {
          if (s < steps(r)) (mlp_loss(ref, test::slice(batches[s], r, w)) / divisor).backward();
        }
        ref_opt.step();
      }
      test::expect_params_close(params_of(net), params_of(ref));
    }
  }
}

}  // namespace
}  // namespace dpx::mpi_test
