#include "support/fsdp_feature_checks.h"

#include <gtest/gtest.h>

#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/fsdp/fully_shard.h"
#include "support/fsdp_models.h"

namespace dpx::test {
namespace {

constexpr int64_t kRows = 2;
constexpr int kAccumulationSteps = 4, kMicro = 3;
constexpr int kClipSteps = 5;
constexpr double kMaxNorm = 0.05;  // small enough to clip every step

}  // namespace

torch::Tensor feature_xs(int world, int step, int micro) {
  return torch::sin(torch::arange(world * kRows * 6, torch::kDouble).reshape({world * kRows, 6}) *
                    (0.3 * step + 0.1 * micro + 1));
}

torch::Tensor feature_ys(int world, int step, int micro) {
  return torch::cos(torch::arange(world * kRows * 4, torch::kDouble).reshape({world * kRows, 4}) *
                    (0.2 * step + 0.7 * micro + 1));
}

torch::Tensor rows_of(const torch::Tensor& t, int rank) { return t.narrow(0, rank * kRows, kRows); }

void expect_same_state(const NamedTensors& got, const NamedTensors& want, double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto g = got[i].second.to(torch::kDouble), w = want[i].second.to(torch::kDouble);
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_TRUE(torch::allclose(g, w, 0, atol))
        << got[i].first << " differs by " << (g - w).abs().max().item<double>();
  }
}

NamedTensors accumulation_reference(int world) {
  auto ref = make_shard_net();
  torch::optim::SGD opt(ref->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int s = 0; s < kAccumulationSteps; ++s) {
    opt.zero_grad();
    for (int m = 0; m < kMicro; ++m) {
      torch::mse_loss(ref->forward(feature_xs(world, s, m)), feature_ys(world, s, m)).backward();
    }
    opt.step();
  }
  return named_state(*ref);
}

void expect_accumulation_without_sync(const std::shared_ptr<ProcessGroup>& pg, bool guard,
                                      const NamedTensors& want) {
  const int rank = pg->rank(), world = pg->size();
  auto net = make_shard_net();
  auto model = shard(net, pg);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int s = 0; s < kAccumulationSteps; ++s) {
    opt.zero_grad();
    std::vector<std::uint64_t> issued;  // collectives of each micro-batch
    for (int m = 0; m < kMicro; ++m) {
      const auto before = pg->collectives_issued();
      auto loss = [&] {
        return torch::mse_loss(model(rows_of(feature_xs(world, s, m), rank)),
                               rows_of(feature_ys(world, s, m), rank));
      };
      if (m == kMicro - 1) {
        loss().backward();
      } else if (guard) {
        auto no_sync = model.fsdp().no_sync();
        loss().backward();
      } else {
        model.fsdp().set_requires_gradient_sync(false);
        loss().backward();
        model.fsdp().set_requires_gradient_sync(true);
      }
      issued.push_back(pg->collectives_issued() - before);
    }
    // Summing per micro-batch gives the same values, so count: without sync, backward
    // reduce-scatters nothing (its all-gathers remain).
    EXPECT_EQ(issued[0], issued[1]);
    EXPECT_LT(issued[1], issued[2]) << "the micro-batches without sync reduced gradients";
    opt.step();
  }
  expect_same_state(full_state_dict(*net, {.rank0_only = false}), want, 1e-12);
}

ClipReference clip_reference(int world, double norm_type) {
  auto ref = make_shard_net();
  torch::optim::SGD opt(ref->parameters(), torch::optim::SGDOptions(0.1));
  ClipReference out;
  for (int s = 0; s < kClipSteps; ++s) {
    opt.zero_grad();
    torch::mse_loss(ref->forward(feature_xs(world, s, 0)), feature_ys(world, s, 0)).backward();
    out.norms.push_back(torch::nn::utils::clip_grad_norm_(ref->parameters(), kMaxNorm, norm_type));
    opt.step();
  }
  out.state = named_state(*ref);
  return out;
}

void expect_clip_grad_norm(const std::shared_ptr<ProcessGroup>& pg, double norm_type,
                           const ClipReference& want) {
  const int rank = pg->rank(), world = pg->size();
  auto net = make_shard_net();
  auto model = shard(net, pg);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  for (int s = 0; s < kClipSteps; ++s) {
    opt.zero_grad();
    torch::mse_loss(model(rows_of(feature_xs(world, s, 0), rank)),
                    rows_of(feature_ys(world, s, 0), rank)).backward();
    const double norm = clip_grad_norm_(*net, kMaxNorm, norm_type);
    EXPECT_NEAR(norm, want.norms[s], 1e-12 * want.norms[s]) << "step " << s;
    EXPECT_GT(norm, kMaxNorm);
    opt.step();
  }
  expect_same_state(full_state_dict(*net, {.rank0_only = false}), want.state, 1e-12);
}

}  // namespace dpx::test
