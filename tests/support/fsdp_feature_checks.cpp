#include "support/fsdp_feature_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "dpx/amp/autocast.h"
#include "dpx/amp/grad_scaler.h"
#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/ddp/distributed_data_parallel.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/fsdp/fully_shard.h"
#include "support/expect_throws.h"
#include "support/fsdp_models.h"

namespace dpx::test {
namespace {

constexpr int64_t kRows = 2;
constexpr int kAccumulationSteps = 4, kMicro = 3;
constexpr int kClipSteps = 5;
constexpr double kMaxNorm = 0.05;  // small enough to clip every step
constexpr int kScalerSteps = 5, kInfStep = 2;
constexpr int kParamDtypeSteps = 3;

// Rank `rank`'s rows of `t`, float32.
torch::Tensor float_rows(const torch::Tensor& t, int rank) {
  return rows_of(t, rank).to(torch::kFloat);
}

// Rows of an n-row parameter on `rank`: torch.chunk's, as fully_shard splits dim 0.
int64_t shard_rows(int64_t n, int rank, int world) {
  const int64_t chunk = (n + world - 1) / world;
  return std::clamp<int64_t>(n - rank * chunk, 0, chunk);
}

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

std::optional<std::string> autocast_unsupported() {
  if (std::string(DPX_TORCH_VERSION).rfind("1.", 0) != 0) return std::nullopt;
  return "LibTorch " DPX_TORCH_VERSION "'s CPU autocast gives layer_norm bfloat16 inputs with "
         "float32 weights, which it refuses (under DDP too)";
}

// The forward computes with the same whole parameters as DDP's, so the two agree closely.
void expect_autocast_and_grad_scaler_as_under_ddp(const std::shared_ptr<ProcessGroup>& pg) {
  const int rank = pg->rank(), world = pg->size();
  auto train = [&](auto& model, torch::nn::Module& net, std::vector<double>& scales) {
    torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.05));
    GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2}, pg);
    for (int s = 0; s < kScalerSteps; ++s) {
      opt.zero_grad();
      torch::Tensor loss;
      {
        AutocastGuard autocast({.device_type = at::kCPU, .dtype = at::kBFloat16});
        loss = torch::mse_loss(model(float_rows(feature_xs(world, s, 0), rank)),
                               float_rows(feature_ys(world, s, 0), rank));
      }
      if (s == kInfStep && rank == 0) loss = loss * std::numeric_limits<float>::infinity();
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      scales.push_back(scaler.get_scale());
    }
  };
  std::vector<double> ddp_scales, fsdp_scales;
  auto ddp_net = make_shard_net(false, torch::kFloat);
  DistributedDataParallel ddp(ddp_net, pg);
  train(ddp, *ddp_net, ddp_scales);
  auto net = make_shard_net(false, torch::kFloat);
  auto model = shard(net, pg);
  train(model, *net, fsdp_scales);
  EXPECT_EQ(fsdp_scales, ddp_scales);
  EXPECT_EQ(fsdp_scales[kInfStep], fsdp_scales[kInfStep - 1] / 2) << "the inf step backed off";
  expect_same_state(full_state_dict(*net, {.rank0_only = false}), named_state(*ddp_net), 1e-6);
}

NamedTensors param_dtype_reference(int world) {
  auto ref = make_shard_net(false, torch::kFloat);
  torch::optim::SGD opt(ref->parameters(), torch::optim::SGDOptions(0.05));
  for (int s = 0; s < kParamDtypeSteps; ++s) {
    opt.zero_grad();
    torch::mse_loss(ref->forward(feature_xs(world, s, 0).to(torch::kFloat)),
                    feature_ys(world, s, 0).to(torch::kFloat)).backward();
    opt.step();
  }
  return named_state(*ref);
}

// The second bound tells bfloat16 computing from float32 throughout.
void expect_param_dtype_bfloat16(const std::shared_ptr<ProcessGroup>& pg,
                                 const NamedTensors& want) {
  const int rank = pg->rank(), world = pg->size();
  auto net = make_shard_net(false, torch::kFloat);
  FullyShardOptions options;
  options.mp_policy.param_dtype = at::kBFloat16;
  auto model = shard(net, pg, options);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05));
  for (int s = 0; s < kParamDtypeSteps; ++s) {
    opt.zero_grad();
    torch::mse_loss(model(float_rows(feature_xs(world, s, 0), rank)),
                    float_rows(feature_ys(world, s, 0), rank)).backward();
    for (const auto& p : net->parameters()) {
      EXPECT_EQ(p.scalar_type(), torch::kFloat);
      if (p.grad().defined()) EXPECT_EQ(p.grad().scalar_type(), torch::kFloat);
    }
    opt.step();
  }
  const auto got = full_state_dict(*net, {.rank0_only = false});
  expect_same_state(got, want, 2e-2);
  double largest = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    largest = std::max(largest, (got[i].second - want[i].second).abs().max().item<double>());
  }
  EXPECT_GT(largest, 1e-5) << "no bfloat16 rounding: the units computed in float32";
}

void expect_sharded_between_iterations(const std::shared_ptr<ProcessGroup>& pg) {
  const int rank = pg->rank(), world = pg->size();
  const auto x = feature_xs(world, 0, 0);
  auto reference = make_shard_net();
  auto net = make_shard_net();
  auto model = shard(net, pg);
  auto expect_sharded = [&] {
    EXPECT_EQ(net->blocks[0]->fc->weight.size(0), shard_rows(13, rank, world));
    EXPECT_EQ(net->embed->weight.size(0), shard_rows(8, rank, world));  // the root's
  };
  expect_sharded();
  torch::Tensor out;
  {
    torch::NoGradGuard no_grad;
    out = model(x);
  }
  expect_sharded();
  EXPECT_TRUE(torch::allclose(out, reference->forward(x), 0, 1e-12));
  model(x).sum().backward();
  expect_sharded();
  EXPECT_EQ(net->blocks[0]->fc->weight.grad().sizes(), net->blocks[0]->fc->weight.sizes());
  EXPECT_FALSE(net->blocks[1]->fc->bias.grad().defined()) << "frozen: no gradient";
}

namespace {

struct DirectImpl : torch::nn::Module {
  DirectImpl() {
    a = register_module("a", torch::nn::Linear(6, 13));
    b = register_module("b", torch::nn::Linear(13, 3));
  }
  torch::Tensor forward(torch::Tensor x) { return b(a->forward(x)); }  // a: around its handle
  dpx::FSDPModule<torch::nn::LinearImpl> a{nullptr}, b{nullptr};
};

}  // namespace

void expect_wrapping_mistakes_explained(const std::shared_ptr<ProcessGroup>& pg) {
  auto net = make_shard_net();
  fully_shard(net, pg);  // the root first: its children's parameters are taken
  auto msg = expect_throws<c10::Error>([&] { fully_shard(net->blocks[0], pg); });
  EXPECT_NE(msg.find("apply it bottom-up"), std::string::npos) << msg;
  msg = expect_throws<c10::Error>([&] { fully_shard(net, pg); });
  EXPECT_NE(msg.find("was applied to this"), std::string::npos) << msg;
  auto other = make_shard_net();
  msg = expect_throws<c10::Error>([&] { clip_grad_norm_(*other, 1.0); });
  EXPECT_NE(msg.find("is sharded"), std::string::npos) << msg;
}

// A Sequential's own forward (seq(x) instead of the root handle's model(x)), and a custom forward
// calling a unit's module directly.
void expect_unit_called_around_its_handle_named(const std::shared_ptr<ProcessGroup>& pg) {
  torch::nn::Sequential seq(torch::nn::Linear(6, 13), torch::nn::Tanh(), torch::nn::Linear(13, 3));
  fully_shard(seq[0], pg);
  auto model = fully_shard(seq, pg);
  auto msg = expect_throws<c10::Error>([&] { seq->forward(torch::ones({2, 6})); });
  EXPECT_NE(msg.find("fully_shard: entry 0 ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("was called by the torch::nn::Sequential's own forward"),
            std::string::npos) << msg;
  EXPECT_EQ(msg.find("mat1 and mat2"), std::string::npos) << msg;
  EXPECT_EQ(model(torch::ones({2, 6})).sizes(), (std::vector<int64_t>{2, 3}));  // the handle
  EXPECT_EQ(seq->named_parameters().size(), 4u);  // names unchanged: 0.weight, ..., 2.bias
  EXPECT_TRUE(seq->named_parameters().contains("0.weight"));

  auto direct = std::make_shared<DirectImpl>();
  fully_shard(direct->a, pg);
  fully_shard(direct->b, pg);
  auto root = fully_shard(direct, pg);
  msg = expect_throws<c10::Error>([&] { root(torch::ones({2, 6})); });
  EXPECT_NE(msg.find("fully_shard: the forward failed before unit 'a' ran through "
                     "fully_shard's steps"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dpx::FSDPModule<BlockImpl>(layers->ptr<BlockImpl>(i))(x)"),
            std::string::npos) << msg;
}

// `step` is a tensor of the default dtype, as PyTorch keeps it (float64 in a float64 program),
// and the param groups have the keys PyTorch 2.x writes.
void expect_full_optimizer_state_dict_as_pythons(const std::shared_ptr<ProcessGroup>& pg) {
  torch::nn::Sequential seq(torch::nn::Linear(6, 5), torch::nn::Linear(5, 3));
  fully_shard(seq[0], pg);
  auto model = fully_shard(seq, pg);
  torch::optim::AdamW opt(seq->parameters(), torch::optim::AdamWOptions(1e-2));
  model(torch::ones({2, 6})).sum().backward();
  opt.step();
  const auto sd = full_optimizer_state_dict(*seq, opt).toGenericDict();
  if (pg->rank() != 0) return;  // rank 0's dict only (FullStateDictOptions::rank0_only)
  const auto state = sd.at("state").toGenericDict().at("0.weight").toGenericDict();
  EXPECT_EQ(state.at("step").toTensor().scalar_type(), torch::kDouble);
  const auto group = sd.at("param_groups").toListRef()[0].toGenericDict();
  for (const char* key : {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "foreach",
                          "capturable", "differentiable", "fused", "decoupled_weight_decay",
                          "params"}) {
    EXPECT_TRUE(group.contains(key)) << key;
  }
  EXPECT_EQ(group.size(), 12u);
  EXPECT_TRUE(group.at("decoupled_weight_decay").toBool());
  EXPECT_TRUE(group.at("fused").isNone());
}

}  // namespace dpx::test
