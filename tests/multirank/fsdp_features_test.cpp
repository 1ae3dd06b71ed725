// fully_shard's features besides plain training (threads as ranks): gradient accumulation
// without sync, clip_grad_norm_ over sharded gradients, autocast with GradScaler, evaluation
// under no_grad, and the state between iterations.
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/fsdp/fully_shard.h"
#include "support/expect_throws.h"
#include "support/fsdp_feature_checks.h"
#include "support/fsdp_models.h"
#include "support/harness.h"

namespace dpx {
namespace {

constexpr int kWorld = 3;

torch::Tensor xs(int step, int micro) { return test::feature_xs(kWorld, step, micro); }
torch::Tensor ys(int step, int micro) { return test::feature_ys(kWorld, step, micro); }
torch::Tensor mine(const torch::Tensor& t, int rank) { return test::rows_of(t, rank); }

void expect_same(const test::NamedTensors& got, const test::NamedTensors& want, double atol) {
  test::expect_same_state(got, want, atol);
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Three micro-batches a step, the first two under no_sync() (or set_requires_gradient_sync),
// against one process that accumulates the same micro-batches' gradients over all ranks' rows
// (support/fsdp_feature_checks.h).
TEST(FsdpFeatures, GradientAccumulationWithoutSyncMatchesOneProcess) {
  const auto want = test::accumulation_reference(kWorld);
  for (bool guard : {true, false}) {
    SCOPED_TRACE(guard ? "no_sync()" : "set_requires_gradient_sync(false)");
    auto store = Store::hash();
    expect_no_errors(test::run_threads(kWorld, [&](int rank) {
      test::expect_accumulation_without_sync(new_process_group("shm", store, rank, kWorld), guard,
                                             want);
    }));
  }
}

// clip_grad_norm_ clips by the norm over every rank's shards: the same total norm and the same
// training as torch::nn::utils::clip_grad_norm_ in one process, for the 2-norm and the max-norm.
TEST(FsdpFeatures, ClipGradNormUsesTheGlobalNorm) {
  for (double norm_type : {2.0, std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE("norm_type " + std::to_string(norm_type));
    const auto want = test::clip_reference(kWorld, norm_type);
    auto store = Store::hash();
    expect_no_errors(test::run_threads(kWorld, [&](int rank) {
      test::expect_clip_grad_norm(new_process_group("gloo", store, rank, kWorld), norm_type, want);
    }));
  }
}

// CPU bfloat16 autocast and GradScaler (its found-inf flag reduced over the group), with rank 0's
// loss made inf at step 2: every rank skips that step and backs the scale off, as under DDP.
// The forward computes with the same whole parameters as DDP's, so the two agree closely.
TEST(FsdpFeatures, AutocastAndGradScalerAsUnderDdp) {
  if (std::string(DPX_TORCH_VERSION).rfind("1.", 0) == 0) {
    GTEST_SKIP() << "SKIPPED: LibTorch " DPX_TORCH_VERSION "'s CPU autocast gives layer_norm "
                    "bfloat16 inputs with float32 weights, which it refuses (under DDP too)";
  }
  constexpr int kSteps = 5, kInfStep = 2;
  auto store = Store::hash();
  expect_no_errors(test::run_threads(2, [&](int rank) {
    auto pg = new_process_group("shm", store, rank, 2);
    auto train = [&](auto& model, torch::nn::Module& net, std::vector<double>& scales) {
      torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.05));
      GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2}, pg);
      for (int s = 0; s < kSteps; ++s) {
        opt.zero_grad();
        torch::Tensor loss;
        {
          AutocastGuard autocast({.device_type = at::kCPU, .dtype = at::kBFloat16});
          loss = torch::mse_loss(model(mine(xs(s, 0), rank).to(torch::kFloat)),
                                 mine(ys(s, 0), rank).to(torch::kFloat));
        }
        if (s == kInfStep && rank == 0) loss = loss * std::numeric_limits<float>::infinity();
        scaler.scale(loss).backward();
        scaler.step(opt);
        scaler.update();
        scales.push_back(scaler.get_scale());
      }
    };
    std::vector<double> ddp_scales, fsdp_scales;
    auto ddp_net = test::make_shard_net(false, torch::kFloat);
    DistributedDataParallel ddp(ddp_net, pg);
    train(ddp, *ddp_net, ddp_scales);
    auto net = test::make_shard_net(false, torch::kFloat);
    auto model = test::shard(net, pg);
    train(model, *net, fsdp_scales);
    EXPECT_EQ(fsdp_scales, ddp_scales);
    EXPECT_EQ(fsdp_scales[kInfStep], fsdp_scales[kInfStep - 1] / 2) << "the inf step backed off";
    expect_same(full_state_dict(*net, {.rank0_only = false}), test::named_state(*ddp_net), 1e-6);
  }));
}

// MixedPrecisionPolicy{param_dtype = bfloat16}: the units compute in bfloat16 while the shards,
// their gradients and the optimizer stay float32. The result is near one float32 process on the
// whole batch, but not as near as float32 throughout would be (which the second bound tells).
TEST(FsdpFeatures, ParamDtypeBFloat16ComputesInBFloat16AndStepsInFloat32) {
  constexpr int kSteps = 3;
  auto ref = test::make_shard_net(false, torch::kFloat);
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.05));
  for (int s = 0; s < kSteps; ++s) {
    ref_opt.zero_grad();
    torch::mse_loss(ref->forward(xs(s, 0).to(torch::kFloat)), ys(s, 0).to(torch::kFloat)).backward();
    ref_opt.step();
  }
  const auto want = test::named_state(*ref);
  auto store = Store::hash();
  expect_no_errors(test::run_threads(kWorld, [&](int rank) {
    auto pg = new_process_group("shm", store, rank, kWorld);
    auto net = test::make_shard_net(false, torch::kFloat);
    FullyShardOptions options;
    options.mp_policy.param_dtype = at::kBFloat16;
    auto model = test::shard(net, pg, options);
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05));
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      torch::mse_loss(model(mine(xs(s, 0), rank).to(torch::kFloat)),
                      mine(ys(s, 0), rank).to(torch::kFloat)).backward();
      for (const auto& p : net->parameters()) {
        EXPECT_EQ(p.scalar_type(), torch::kFloat);
        if (p.grad().defined()) EXPECT_EQ(p.grad().scalar_type(), torch::kFloat);
      }
      opt.step();
    }
    const auto got = full_state_dict(*net, {.rank0_only = false});
    expect_same(got, want, 2e-2);
    double largest = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      largest = std::max(largest, (got[i].second - want[i].second).abs().max().item<double>());
    }
    EXPECT_GT(largest, 1e-5) << "no bfloat16 rounding: the units computed in float32";
  }));
}

// Between iterations every parameter holds its shard (what the optimizer steps on); a forward
// under no_grad (evaluation) gathers what it needs and leaves every unit resharded.
TEST(FsdpFeatures, ShardsBetweenIterationsAndAfterEvaluation) {
  auto store = Store::hash();
  expect_no_errors(test::run_threads(kWorld, [&](int rank) {
    auto pg = new_process_group("shm", store, rank, kWorld);
    auto reference = test::make_shard_net();
    auto net = test::make_shard_net();
    auto model = test::shard(net, pg);
    auto expect_sharded = [&] {
      // blocks0.fc.weight: 13 rows over 3 ranks in chunks of 5 (5, 5, 3)
      EXPECT_EQ(net->blocks[0]->fc->weight.size(0), rank < 2 ? 5 : 3);
      EXPECT_EQ(net->embed->weight.size(0), rank < 2 ? 3 : 2);  // the root's: 8 rows
    };
    expect_sharded();
    torch::Tensor out;
    {
      torch::NoGradGuard no_grad;
      out = model(xs(0, 0));
    }
    expect_sharded();
    EXPECT_TRUE(torch::allclose(out, reference->forward(xs(0, 0)), 0, 1e-12));
    model(xs(0, 0)).sum().backward();
    expect_sharded();
    EXPECT_EQ(net->blocks[0]->fc->weight.grad().sizes(), net->blocks[0]->fc->weight.sizes());
    EXPECT_FALSE(net->blocks[1]->fc->bias.grad().defined()) << "frozen: no gradient";
  }));
}

// Wrapping errors say what to do.
TEST(FsdpFeatures, WrappingMistakesAreExplained) {
  auto store = Store::hash();
  expect_no_errors(test::run_threads(2, [&](int rank) {
    auto pg = new_process_group("shm", store, rank, 2);
    auto net = test::make_shard_net();
    fully_shard(net, pg);  // the root first: its children's parameters are taken
    auto msg = test::expect_throws<c10::Error>([&] { fully_shard(net->blocks[0], pg); });
    EXPECT_NE(msg.find("apply it bottom-up"), std::string::npos) << msg;
    msg = test::expect_throws<c10::Error>([&] { fully_shard(net, pg); });
    EXPECT_NE(msg.find("was applied to this"), std::string::npos) << msg;
    auto other = test::make_shard_net();
    msg = test::expect_throws<c10::Error>([&] { clip_grad_norm_(*other, 1.0); });
    EXPECT_NE(msg.find("is sharded"), std::string::npos) << msg;
  }));
}

// A unit reached around its handle fails the first forward with dpx's message naming it, not
// with a kernel's shape error: a Sequential's own forward (seq(x) instead of the root handle's
// model(x)), and a custom forward calling a unit's module directly.
TEST(FsdpFeatures, AUnitCalledAroundItsHandleFailsTheFirstForwardNamingIt) {
  auto store = Store::hash();
  expect_no_errors(test::run_threads(2, [&](int rank) {
    auto pg = new_process_group("shm", store, rank, 2);
    torch::nn::Sequential seq(torch::nn::Linear(6, 13), torch::nn::Tanh(), torch::nn::Linear(13, 3));
    fully_shard(seq[0], pg);
    auto model = fully_shard(seq, pg);
    auto msg = test::expect_throws<c10::Error>([&] { seq->forward(torch::ones({2, 6})); });
    EXPECT_NE(msg.find("fully_shard: entry 0 ("), std::string::npos) << msg;
    EXPECT_NE(msg.find("was called by the torch::nn::Sequential's own forward"),
              std::string::npos) << msg;
    EXPECT_EQ(msg.find("mat1 and mat2"), std::string::npos) << msg;
    EXPECT_EQ(model(torch::ones({2, 6})).sizes(), (std::vector<int64_t>{2, 3}));  // the handle
    EXPECT_EQ(seq->named_parameters().size(), 4u);  // names unchanged: 0.weight, ..., 2.bias
    EXPECT_TRUE(seq->named_parameters().contains("0.weight"));

    struct DirectImpl : torch::nn::Module {
      DirectImpl() {
        a = register_module("a", torch::nn::Linear(6, 13));
        b = register_module("b", torch::nn::Linear(13, 3));
      }
      torch::Tensor forward(torch::Tensor x) { return b(a->forward(x)); }  // a: around it
      dpx::FSDPModule<torch::nn::LinearImpl> a{nullptr}, b{nullptr};
    };
    auto direct = std::make_shared<DirectImpl>();
    fully_shard(direct->a, pg);
    fully_shard(direct->b, pg);
    auto root = fully_shard(direct, pg);
    msg = test::expect_throws<c10::Error>([&] { root(torch::ones({2, 6})); });
    EXPECT_NE(msg.find("fully_shard: the forward failed before unit 'a' ran through "
                       "fully_shard's steps"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dpx::FSDPModule<BlockImpl>(layers->ptr<BlockImpl>(i))(x)"),
              std::string::npos) << msg;
  }));
}

// The full optimizer state dict's `step` is a tensor of the default dtype, as PyTorch keeps it
// (float64 in a float64 program), and the param groups have the keys PyTorch 2.x writes.
TEST(FsdpFeatures, TheFullOptimizerStateDictHasPythonsTypesAndKeys) {
  auto store = Store::hash();
  const auto before = torch::get_default_dtype();
  torch::set_default_dtype(caffe2::TypeMeta::Make<double>());
  expect_no_errors(test::run_threads(2, [&](int rank) {
    auto pg = new_process_group("shm", store, rank, 2);
    torch::nn::Sequential seq(torch::nn::Linear(6, 5), torch::nn::Linear(5, 3));
    fully_shard(seq[0], pg);
    auto model = fully_shard(seq, pg);
    torch::optim::AdamW opt(seq->parameters(), torch::optim::AdamWOptions(1e-2));
    model(torch::ones({2, 6})).sum().backward();
    opt.step();
    const auto sd = full_optimizer_state_dict(*seq, opt).toGenericDict();
    if (rank != 0) return;  // rank 0's dict only (FullStateDictOptions::rank0_only)
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
  }));
  torch::set_default_dtype(before);
}

}  // namespace
}  // namespace dpx
