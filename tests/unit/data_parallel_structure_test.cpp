// DataParallel's inputs and outputs of any shape, how many replicas run, and its errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <map>
#include <stdexcept>

#include "dpx/data_parallel/data_parallel.h"
#include "data_parallel/data_parallel_backward.h"
#include "data_parallel/parallel_apply_threads.h"

namespace {

dpx::DataParallelOptions cpu_replicas(int n) {
  dpx::DataParallelOptions options;
  options.devices.assign(n, torch::kCPU);
  return options;
}

using Nested = std::tuple<torch::Tensor, std::vector<torch::Tensor>,
                          std::map<std::string, torch::Tensor>>;

// Counts forward calls (the counter is shared by clones) and returns nested structures.
struct NestedNetImpl : torch::nn::Cloneable<NestedNetImpl> {
  NestedNetImpl() { reset(); }
  void reset() override { scale = register_parameter("scale", torch::ones({3})); }
  Nested forward(std::tuple<torch::Tensor, torch::Tensor> pair,
                 std::map<std::string, torch::Tensor> named, int64_t offset) {
    calls->fetch_add(1);
    auto [a, b] = pair;
    auto s = a * scale + named.at("c");
    std::map<std::string, torch::Tensor> named_out{{"sum", a + b},
                                                   {"batch", torch::full({a.size(0)}, 1.0)}};
    return {s + offset, {b * 2, s.sum(1)}, named_out};
  }
  torch::Tensor scale;
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
};
TORCH_MODULE(NestedNet);

TEST(DataParallelStructure, NestedInputsAndOutputsKeepTheirShape) {
  torch::manual_seed(3);
  NestedNet net;
  dpx::DataParallel dp(net, cpu_replicas(2));
  auto a = torch::randn({6, 3});
  auto b = torch::randn({6, 3});
  auto c = torch::randn({6, 3});
  std::map<std::string, torch::Tensor> named{{"c", c}};
  auto [s, list, dict] = dp(std::make_tuple(a, b), named, int64_t{5});
  EXPECT_EQ(net->calls->load(), 2);  // once per replica

  auto [es, elist, edict] = net->forward({a, b}, named, 5);
  EXPECT_TRUE(torch::allclose(s, es));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_TRUE(torch::allclose(list[0], elist[0]));
  EXPECT_TRUE(torch::allclose(list[1], elist[1]));
  ASSERT_EQ(dict.size(), 2u);
  EXPECT_TRUE(torch::allclose(dict.at("sum"), edict.at("sum")));
  EXPECT_TRUE(torch::equal(dict.at("batch"), torch::ones({6})));  // 3 + 3 rows

  // The gradient reaches the parameter through the nested outputs.
  (s.sum() + list[1].sum()).backward();
  // Summed per replica, then over replicas: rounding differs from the whole-batch sum (an
  // element near 0.009 once missed allclose's default atol of 1e-8 by that).
  EXPECT_TRUE(torch::allclose(net->scale.grad(), 2 * a.sum(0), 1e-5, 1e-6))
      << net->scale.grad() << " vs " << 2 * a.sum(0);
}

TEST(DataParallelStructure, SmallBatchRunsFewerReplicas) {
  NestedNet net;
  dpx::DataParallel dp(net, cpu_replicas(4));
  std::map<std::string, torch::Tensor> named{{"c", torch::zeros({5, 3})}};
  // chunk(4) of 5 rows gives 2, 2, 1: three replicas run, as in PyTorch.
  auto out = std::get<0>(dp(std::make_tuple(torch::ones({5, 3}), torch::ones({5, 3})), named, 0));
  EXPECT_EQ(out.size(0), 5);
  EXPECT_EQ(net->calls->load(), 3);
  named["c"] = torch::zeros({1, 3});
  out = std::get<0>(dp(std::make_tuple(torch::ones({1, 3}), torch::ones({1, 3})), named, 0));
  EXPECT_EQ(out.size(0), 1);
  EXPECT_EQ(net->calls->load(), 4);
}

struct ThrowingImpl : torch::nn::Cloneable<ThrowingImpl> {
  ThrowingImpl() { reset(); }
  void reset() override { w = register_parameter("w", torch::ones({1})); }
  torch::Tensor forward(torch::Tensor x) {
    if (x[0].item<float>() > 0) {  // only the replica whose chunk starts with a positive value
      if (use_std) {
        throw std::runtime_error("bad chunk");
      }
      TORCH_CHECK(false, "bad chunk");
    }
    return x * w;
  }
  torch::Tensor w;
  bool use_std = false;
};
TORCH_MODULE(Throwing);

TEST(DataParallelStructure, ReplicaExceptionNamesTheReplica) {
  Throwing net;
  dpx::DataParallel dp(net, cpu_replicas(3));
  auto x = torch::tensor({-1.0, -1.0, 1.0, 1.0, -1.0, -1.0});  // replica 1 gets {1, 1}
  try {
    dp(x);
    FAIL() << "expected a ReplicaError";
  } catch (const dpx::ReplicaError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("Caught c10::Error in replica 1 on device cpu."), std::string::npos)
        << message;
    EXPECT_NE(message.find("bad chunk"), std::string::npos) << message;
    EXPECT_EQ(e.replica(), 1);
    EXPECT_THROW(std::rethrow_exception(e.original()), c10::Error);
  }
  net->use_std = true;
  dp->reset_replicas();  // a plain member changed: clone again
  try {
    dp(x);
    FAIL() << "expected a ReplicaError";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Caught std::runtime_error in replica 1 on device cpu."),
              std::string::npos)
        << e.what();
  }
  // The failed forward left nothing behind: the next one works.
  auto out = dp(-torch::ones({6}));
  EXPECT_TRUE(torch::equal(out, -torch::ones({6})));
}

// A module whose parameter lives on the meta device: "elsewhere" without a GPU.
struct OnMetaImpl : torch::nn::Cloneable<OnMetaImpl> {
  OnMetaImpl() { reset(); }
  void reset() override { w = register_parameter("w", torch::empty({4}, torch::kMeta)); }
  torch::Tensor forward(torch::Tensor x) { return x * w; }
  torch::Tensor w;
};

TEST(DataParallelStructure, ModuleNotOnFirstDeviceIsAnError) {
  dpx::DataParallel dp(std::make_shared<OnMetaImpl>(), cpu_replicas(2));
  try {
    dp->forward(torch::zeros({4, 4}));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("module must have its parameters and buffers on device "
                                         "cpu (devices[0]) but found one of them on device: meta"),
              std::string::npos)
        << e.what();
  }
}

TEST(DataParallelStructure, GpuDevicesWithoutAGpuAreAnError) {
  if (torch::cuda::is_available()) {
    GTEST_SKIP() << "CUDA is available here; this checks the CPU-only error";
  }
  dpx::DataParallelOptions options;
  options.devices = {torch::Device(torch::kCUDA, 0), torch::Device(torch::kCUDA, 1)};
  try {
    dpx::DataParallel dp(std::make_shared<torch::nn::LinearImpl>(4, 2), options);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA is not available"), std::string::npos) << e.what();
  }
}

TEST(DataParallelStructure, DefaultsFollowTheMachine) {
  dpx::DataParallel dp(std::make_shared<torch::nn::LinearImpl>(4, 2));
  const auto cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(dp->devices().size(), cores);
  EXPECT_EQ(dp->output_device(), torch::Device(torch::kCPU));
  EXPECT_EQ(dp->threads_per_replica(), 1);
  dpx::DataParallelOptions options = cpu_replicas(1);
  options.threads_per_replica = 3;
  dpx::DataParallel one(std::make_shared<torch::nn::LinearImpl>(4, 2), options);
  EXPECT_EQ(one->threads_per_replica(), 3);
  // One device: the module itself runs, in the caller's thread.
  auto x = torch::randn({3, 4});
  EXPECT_TRUE(torch::equal(one(x), one->module()->forward(x)));
}

// DataParallel is a module holder like TORCH_MODULE's: the wrapped module is its child "module".
TEST(DataParallelStructure, IsAModuleHolderOfAModuleHoldingTheWrappedOne) {
  torch::nn::Linear net(4, 2);
  dpx::DataParallel dp(net, cpu_replicas(2));
  using Holder = torch::nn::ModuleHolder<dpx::DataParallelImpl<torch::nn::LinearImpl>>;
  static_assert(std::is_base_of_v<Holder, decltype(dp)>);
  auto names = dp->named_parameters().keys();
  EXPECT_EQ(names, (std::vector<std::string>{"module.weight", "module.bias"}));
  EXPECT_EQ(dp->module(), net.ptr());
  dp->eval();
  EXPECT_FALSE(net->is_training());
  dp->train();
  EXPECT_TRUE(net->is_training());

  // torch::save of the holder writes "module.*" keys that load into another DataParallel.
  const std::string path = ::testing::TempDir() + "/dp_holder.pt";
  torch::save(dp, path);
  torch::nn::Linear other(4, 2);
  dpx::DataParallel loaded(other, cpu_replicas(2));
  torch::load(loaded, path);
  EXPECT_TRUE(torch::equal(other->weight, net->weight));
  EXPECT_TRUE(torch::equal(other->bias, net->bias));
  std::remove(path.c_str());
}

TEST(DataParallelStructure, ReplicasFollowTheModulesTensors) {
  auto net = std::make_shared<torch::nn::LinearImpl>(4, 2);
  dpx::DataParallel dp(net, cpu_replicas(2));
  auto x = torch::randn({4, 4});
  dp(x);
  // Replace a parameter's tensor and the module's weights in place: replicas follow.
  {
    torch::NoGradGuard no_grad;
    net->weight.mul_(2);
    net->bias.set_data(torch::ones({2}));
  }
  // Products of different batch sizes may round differently: a float tolerance, not 1e-8.
  EXPECT_TRUE(torch::allclose(dp(x), net->forward(x), 1e-5, 1e-6));
}

// Records the intra-op thread count each replica's thread sees.
struct ThreadProbeImpl : torch::nn::Cloneable<ThreadProbeImpl> {
  ThreadProbeImpl() { reset(); }
  void reset() override { w = register_parameter("w", torch::ones({1})); }
  torch::Tensor forward(torch::Tensor x) {
    seen->fetch_add(at::get_num_threads() * 1000 + 1);
    return x * w;
  }
  torch::Tensor w;
  std::shared_ptr<std::atomic<int>> seen = std::make_shared<std::atomic<int>>(0);
};

TEST(DataParallelStructure, EachReplicaThreadHasItsOwnIntraOpThreads) {
  const int caller = at::get_num_threads();
  auto net = std::make_shared<ThreadProbeImpl>();
  dpx::DataParallelOptions options = cpu_replicas(2);
  options.threads_per_replica = 3;
  dpx::DataParallel dp(net, options);
  dp(torch::ones({4}));
  EXPECT_EQ(net->seen->load(), 2 * (3 * 1000 + 1));  // two replicas, 3 threads each
  EXPECT_EQ(at::get_num_threads(), caller);         // the caller's setting is untouched
}

TEST(DataParallelStructure, SplitsAlongAnotherDimension) {
  auto net = std::make_shared<ThreadProbeImpl>();
  dpx::DataParallelOptions options = cpu_replicas(2);
  options.dim = 1;
  dpx::DataParallel dp(net, options);
  auto x = torch::arange(12.0).reshape({2, 6}).requires_grad_(true);
  auto out = dp(x);
  EXPECT_TRUE(torch::equal(out, x));
  (out * torch::arange(12.0).reshape({2, 6})).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), torch::arange(12.0).reshape({2, 6})));
  EXPECT_EQ(net->w.grad().item<float>(), (torch::arange(12.0) * torch::arange(12.0)).sum().item<float>());
}

TEST(DataParallelStructure, InferenceModeWorks) {
  auto net = std::make_shared<ThreadProbeImpl>();
  dpx::DataParallel dp(net, cpu_replicas(2));
  c10::InferenceMode guard;
  auto out = dp(torch::ones({4}));
  EXPECT_TRUE(torch::equal(out, torch::ones({4})));
  EXPECT_FALSE(out.requires_grad());
}

// The one engine call CUDA replicas take (Note [Parallel backward on CUDA]), run here on CPU
// replicas, gives what the replica threads give and what the module gives on the whole batch:
// parameter gradients summed over replicas, input gradients stitched from their chunks, none
// for a parameter no replica uses.
TEST(DataParallelStructure, OneEngineCallBackwardGivesWhatReplicaThreadsGive) {
  auto run_backward = [](bool one_engine_call) {
    torch::manual_seed(5);
    auto w = torch::randn({3, 2}, torch::requires_grad());
    auto unused = torch::randn({2}, torch::requires_grad());
    auto x = torch::randn({5, 3}, torch::requires_grad());
    dpx::detail::ReplicaRun run;
    run.devices = {torch::kCPU, torch::kCPU};
    run.one_engine_call = one_engine_call;
    run.params = {w, unused};
    run.inputs = {x};
    std::vector<torch::Tensor> outs;
    const int64_t rows[2] = {3, 2};
    for (int r = 0; r < 2; ++r) {
      auto wr = w.detach().requires_grad_(true);
      auto ur = unused.detach().requires_grad_(true);
      auto xr = x.detach().narrow(0, r * rows[0], rows[r]).requires_grad_(true);
      auto y = torch::tanh(xr.mm(wr));
      run.leaves.push_back({wr, ur, xr});
      run.outputs.push_back({y});
      outs.push_back(y.detach());
    }
    auto gathered = torch::cat(outs, 0);
    auto threads = std::make_shared<dpx::detail::ReplicaThreads>(1);
    dpx::detail::attach_parallel_backward(threads, std::move(run), c10::IValue(gathered));
    (gathered * gathered).sum().backward();
    return std::vector<torch::Tensor>{w.grad(), unused.grad(), x.grad()};
  };
  torch::manual_seed(5);
  auto w = torch::randn({3, 2}, torch::requires_grad());
  torch::randn({2});
  auto x = torch::randn({5, 3}, torch::requires_grad());
  auto y = torch::tanh(x.mm(w));
  (y * y).sum().backward();
  for (bool one_engine_call : {false, true}) {
    SCOPED_TRACE(one_engine_call ? "one engine call" : "replica threads");
    auto got = run_backward(one_engine_call);
    ASSERT_TRUE(got[0].defined() && got[2].defined());
    EXPECT_TRUE(torch::allclose(got[0], w.grad(), 1e-6, 1e-7));
    EXPECT_FALSE(got[1].defined());
    EXPECT_TRUE(torch::allclose(got[2], x.grad(), 1e-6, 1e-7));
  }
}

}  // namespace
