// Checkpoint files and the Checkpointer in one process: integrity checks, pruning, and
// resuming giving exactly the parameters of training straight through.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "dpx/checkpoint/checkpointer.h"
#include "dpx/runtime/cuda.h"

namespace {

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dpx-ckpt-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  dpx::Checkpointer checkpointer(int keep_last = 3) {
    return dpx::Checkpointer({.directory = dir_, .keep_last = keep_last}, nullptr);
  }
  std::string dir_;
};

// One SGD-with-momentum step on a batch drawn from the default CPU generator, so a resumed
// run matches only if parameters, optimizer state and the RNG all came back.
void train_step(Net& net, torch::optim::Optimizer& opt) {
  auto x = torch::randn({4, 8});
  auto y = torch::randint(0, 3, {4});
  opt.zero_grad();
  torch::nn::functional::cross_entropy(net.forward(x), y).backward();
  opt.step();
}

torch::optim::SGD make_sgd(Net& net) {
  return torch::optim::SGD(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
}

void expect_same_parameters(Net& a, Net& b) {
  auto pa = a.parameters(), pb = b.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(pa[i].equal(pb[i])) << "parameter " << i;
  }
}

std::string error_of(const std::string& path) {
  try {
    dpx::read_checkpoint_file(path);
  } catch (const dpx::CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST_F(CheckpointTest, NoCheckpointMeansFreshStart) {
  Net net;
  auto opt = make_sgd(net);
  EXPECT_FALSE(checkpointer().load_latest(net, opt).has_value());
}

TEST_F(CheckpointTest, ResumeEqualsStraightThrough) {
  torch::manual_seed(1);
  Net straight;
  auto opt = make_sgd(straight);
  for (int i = 0; i < 5; ++i) train_step(straight, opt);
  auto ckpt = checkpointer();
  ckpt.save(straight, opt, {.epoch = 1, .step = 5, .sampler_position = 20});
  for (int i = 0; i < 5; ++i) train_step(straight, opt);

  torch::manual_seed(99);  // a different initialization and RNG stream, all replaced by load
  Net resumed;
  auto opt2 = make_sgd(resumed);
  auto progress = ckpt.load_latest(resumed, opt2);
  ASSERT_TRUE(progress.has_value());
  EXPECT_EQ(progress->epoch, 1);
  EXPECT_EQ(progress->step, 5);
  EXPECT_EQ(progress->sampler_position, 20);
  for (int i = 0; i < 5; ++i) train_step(resumed, opt2);
  expect_same_parameters(straight, resumed);
}

TEST_F(CheckpointTest, KeepsTheLastK) {
  Net net;
  auto opt = make_sgd(net);
  auto ckpt = checkpointer(2);
  for (int64_t step = 1; step <= 4; ++step) ckpt.save(net, opt, {.step = step});
  EXPECT_EQ(ckpt.list(), (std::vector<std::string>{ckpt.path_for_step(4), ckpt.path_for_step(3)}));
}

TEST_F(CheckpointTest, TruncatedFileIsRefusedAndThePreviousOneUsed) {
  Net net;
  auto opt = make_sgd(net);
  auto ckpt = checkpointer();
  ckpt.save(net, opt, {.step = 1});
  ckpt.save(net, opt, {.step = 2});
  const auto latest = ckpt.path_for_step(2);
  struct stat st {};
  ASSERT_EQ(::stat(latest.c_str(), &st), 0);
  ASSERT_EQ(::truncate(latest.c_str(), st.st_size - 100), 0);
  const auto err = error_of(latest);
  EXPECT_NE(err.find("checkpoint " + latest + " is truncated"), std::string::npos) << err;
  ASSERT_EQ(::truncate(latest.c_str(), 10), 0);
  EXPECT_NE(error_of(latest).find("shorter than its header"), std::string::npos);

  auto progress = ckpt.load_latest(net, opt);
  ASSERT_TRUE(progress.has_value());
  EXPECT_EQ(progress->step, 1);
}

TEST_F(CheckpointTest, BitFlipIsRefusedAndThePreviousOneUsed) {
  Net net;
  auto opt = make_sgd(net);
  auto ckpt = checkpointer();
  ckpt.save(net, opt, {.step = 1});
  ckpt.save(net, opt, {.step = 2});
  const auto latest = ckpt.path_for_step(2);
  {
    std::fstream f(latest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(200);
    const char byte = static_cast<char>(f.get() ^ 0x10);
    f.seekp(200);
    f.put(byte);
  }
  const auto err = error_of(latest);
  EXPECT_NE(err.find("checkpoint " + latest + " is corrupt: CRC32"), std::string::npos) << err;
  auto progress = ckpt.load_latest(net, opt);
  ASSERT_TRUE(progress.has_value());
  EXPECT_EQ(progress->step, 1);
}

TEST_F(CheckpointTest, CreatesMissingDirectories) {
  Net net;
  auto opt = make_sgd(net);
  dpx::Checkpointer ckpt({.directory = dir_ + "/runs/a/ckpt"}, nullptr);
  ckpt.save(net, opt, {.step = 1});
  EXPECT_EQ(ckpt.list().size(), 1u);
}

TEST_F(CheckpointTest, ForeignFileIsRefused) {
  const std::string path = dir_ + "/checkpoint-000000000007.dpx";
  std::ofstream(path) << "this is not a checkpoint, just some text long enough";
  EXPECT_NE(error_of(path).find("not a dpx checkpoint"), std::string::npos);
}

}  // namespace

// map_location (docs/checkpoint.md, "Loading onto another device").
namespace {

dpx::Checkpointer mapped(const std::string& dir, c10::Device to) {
  dpx::CheckpointerOptions o{.directory = dir};
  o.map_location = to;
  return dpx::Checkpointer(o, nullptr);
}

TEST_F(CheckpointTest, MapLocationCpuLoadsTheSameState) {
  torch::manual_seed(1);
  Net saved;
  auto opt = make_sgd(saved);
  train_step(saved, opt);
  checkpointer().save(saved, opt, {0, 1, 4});
  torch::manual_seed(2);
  Net loaded;
  auto opt2 = make_sgd(loaded);
  auto progress = mapped(dir_, at::kCPU).load_latest(loaded, opt2);
  ASSERT_TRUE(progress.has_value());
  EXPECT_EQ(progress->step, 1);
  expect_same_parameters(saved, loaded);
}

TEST_F(CheckpointTest, MapLocationOnAMissingGpuNamesIt) {
  if (dpx::cuda::device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  Net net;
  auto opt = make_sgd(net);
  checkpointer().save(net, opt, {0, 1, 4});
  try {
    mapped(dir_, at::Device("cuda:0")).load_latest(net, opt);
    ADD_FAILURE() << "loaded onto a GPU that is not there";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("sees no CUDA device"));
  }
}

// CUDA both ways: saved on cuda:0, loaded onto the CPU; saved on the CPU, loaded onto cuda:0.
TEST_F(CheckpointTest, MapLocationMovesBetweenCudaAndCpu) {
  if (dpx::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(1);
  Net on_gpu;
  on_gpu.to(at::Device("cuda:0"));
  auto opt = make_sgd(on_gpu);
  checkpointer().save(on_gpu, opt, {0, 1, 4});
  Net on_cpu;
  auto opt_cpu = make_sgd(on_cpu);
  ASSERT_TRUE(mapped(dir_, at::kCPU).load_latest(on_cpu, opt_cpu).has_value());
  for (const auto& p : on_cpu.parameters()) EXPECT_TRUE(p.device().is_cpu());
  auto gpu_params = on_gpu.parameters(), cpu_params = on_cpu.parameters();
  for (size_t i = 0; i < gpu_params.size(); ++i) {
    EXPECT_TRUE(gpu_params[i].cpu().equal(cpu_params[i])) << i;
  }
  std::system(("rm -f " + dir_ + "/*").c_str());
  checkpointer().save(on_cpu, opt_cpu, {0, 2, 4});
  Net back;
  back.to(at::Device("cuda:0"));
  auto opt_back = make_sgd(back);
  ASSERT_TRUE(mapped(dir_, at::Device("cuda")).load_latest(back, opt_back).has_value());
  auto back_params = back.parameters();
  for (size_t i = 0; i < back_params.size(); ++i) {
    EXPECT_EQ(back_params[i].device(), at::Device("cuda:0"));
    EXPECT_TRUE(back_params[i].cpu().equal(cpu_params[i])) << i;
  }
}

// Dropout on a GPU draws from that GPU's generator: a run resumed from a checkpoint, in either
// format, draws the masks of the run that went straight through (Note [CUDA random state]),
// though another seed and another draw moved the generator before it loaded.
struct DropNet : torch::nn::Module {
  DropNet() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    drop = register_module("drop", torch::nn::Dropout(0.5));
    fc2 = register_module("fc2", torch::nn::Linear(16, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(drop(torch::relu(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};

class CheckpointCuda : public CheckpointTest {};

TEST_F(CheckpointCuda, DropoutOnTheGpuContinuesAsTheRunThatWentStraightThrough) {
  if (dpx::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const at::Device gpu("cuda:0");
  torch::manual_seed(3);
  std::vector<torch::Tensor> xs;
  for (int s = 0; s < 4; ++s) xs.push_back(torch::randn({32, 8}).to(gpu));
  auto step = [&](DropNet& net, torch::optim::Optimizer& opt, int s) {
    opt.zero_grad();
    net.forward(xs[s]).pow(2).mean().backward();
    opt.step();
  };
  for (auto format : {dpx::CheckpointFormat::kDpx, dpx::CheckpointFormat::kTorchSave}) {
    SCOPED_TRACE(format == dpx::CheckpointFormat::kDpx ? "dpx format" : "torch.save format");
    std::system(("rm -f " + dir_ + "/*").c_str());
    dpx::Checkpointer ckpt({.directory = dir_, .format = format}, nullptr);
    torch::manual_seed(1);
    DropNet straight;
    straight.to(gpu);
    torch::optim::SGD opt(straight.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    step(straight, opt, 0);
    step(straight, opt, 1);
    ckpt.save(straight, opt, {0, 2, 0});
    step(straight, opt, 2);
    step(straight, opt, 3);

    torch::manual_seed(77);  // another run: other seeds, and a draw on the GPU
    DropNet resumed;
    resumed.to(gpu);
    torch::dropout(torch::ones({64}, gpu), 0.5, /*train=*/true);
    torch::optim::SGD opt2(resumed.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    ASSERT_TRUE(ckpt.load_latest(resumed, opt2).has_value());
    step(resumed, opt2, 2);
    step(resumed, opt2, 3);
    auto a = straight.parameters(), b = resumed.parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(a[i].cpu().allclose(b[i].cpu(), 0, 1e-6)) << "parameter " << i;
    }
  }
}

}  // namespace
