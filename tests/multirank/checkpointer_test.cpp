// Every rank of a group loads the checkpoint rank 0 wrote.
#include <torch/torch.h>

#include <cstdlib>

#include "dpx/checkpoint/checkpointer.h"
#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx {
namespace {

TEST(Checkpointer, EveryRankLoadsRankZerosCheckpoint) {
  char tmpl[] = "/tmp/dpx-ckpt-mr-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  constexpr int kWorld = 2;
  test::StoreServer server;
  std::vector<at::Tensor> loaded(kWorld);
  at::Tensor saved;
  const auto errors = test::run_threads(kWorld, [&](int rank) {
    auto pg = new_process_group("gloo", server.client(), rank, kWorld);
    torch::nn::Linear net(4, 2);
    torch::NoGradGuard no_grad;
    net->weight.fill_(rank + 1);  // ranks differ before the load
    torch::optim::SGD opt(net->parameters(), 0.1);
    Checkpointer ckpt({.directory = dir}, pg);
    EXPECT_FALSE(ckpt.load_latest(*net, opt).has_value());
    if (rank == 0) saved = net->weight.clone();
    ckpt.save(*net, opt, {.epoch = 2, .step = 7, .sampler_position = 64});
    net->weight.fill_(-5);
    auto progress = ckpt.load_latest(*net, opt);
    ASSERT_TRUE(progress.has_value());
    EXPECT_EQ(progress->step, 7);
    EXPECT_EQ(progress->sampler_position, 64);
    loaded[rank] = net->weight.clone();
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  for (int r = 0; r < kWorld; ++r) EXPECT_TRUE(loaded[r].equal(saved)) << "rank " << r;
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace dpx
