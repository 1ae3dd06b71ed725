// dpx DDP against PyTorch's Python DDP (gloo, 2 ranks): same initial weights, same data, same
// optimizer; the final parameters must agree. The Python side is tests/python/ddp_reference.py;
// the exchange format (raw little-endian arrays + meta.json) is described there.
#include <torch/torch.h>

#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "dpx/dpx.h"
#include "multiproc/ddp_models.h"
#include "support/ddp_python.h"
#include "support/ddp_python_run.h"
#include "support/harness.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"

namespace dpx::ddp_python_test {
namespace {

using namespace test::python;  // the oracle's helpers and constants

TEST(DdpAgainstPython, SameFinalParameters) {
  DPX_SKIP_WITHOUT_PYTHON();
  PythonRun py;
  ASSERT_TRUE(py.ok()) << "python reference failed:\n" << py.log();
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(kWorld, [&](int rank) {
    torch::set_num_threads(1);
    auto pg = new_process_group("gloo", server.client(), rank, kWorld);
    auto net = start_model(rank, py.init());
    DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(ddp->parameters(), torch::optim::SGDOptions(kLr).momentum(kMomentum));
    train(ddp, opt, py.data(), rank);
    if (rank == 0) write_raw(py.dir() + "/dpx_final.bin", flat_params(net));
  }));
  expect_same_params(py.dir() + "/python_final.bin", py.dir() + "/dpx_final.bin");
}

// powersgd_hook (support/ddp_python.h) against PyTorch's powerSGD_hook on gloo: same random
// factors (numpy's seed draws), same parameters. One bucket: with several, PyTorch 1.13's own
// hook deadlocks on gloo (its futures' callbacks issue the P and Q all-reduces in completion
// order, which differs between ranks). On mpi: tests/mpi/mpi_ddp_python_test.cpp.
TEST(PowerSgdAgainstPython, SameFinalParameters) {
  DPX_SKIP_WITHOUT_PYTHON();
  DPX_SKIP_UNLESS_PYTHON_HAS(DPX_PYTHON, "numpy");  // PyTorch's powerSGD_hook needs it
  PythonRun py(kPowerSgdMeta);
  ASSERT_TRUE(py.ok()) << "python reference failed:\n" << py.log();
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(kWorld, [&](int rank) {
    torch::set_num_threads(1);
    train_with_powersgd(new_process_group("gloo", server.client(), rank, kWorld), py.init(),
                        py.data(), py.dir());
  }));
  expect_same_params(py.dir() + "/python_final.bin", py.dir() + "/dpx_final.bin");
}

// post-local SGD (support/ddp_python.h) on shm against PyTorch's: each rank's own parameters.
// On mpi: tests/mpi/mpi_ddp_python_test.cpp.
TEST(PostLocalSgdAgainstPython, SameParametersOnEveryRank) {
  DPX_SKIP_WITHOUT_PYTHON();
  PythonRun py(kPostLocalSgdMeta);
  ASSERT_TRUE(py.ok()) << "python reference failed:\n" << py.log();
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(kWorld, [&](int rank) {
    torch::set_num_threads(1);
    train_with_post_local_sgd(new_process_group("shm", server.client(), rank, kWorld), py.init(),
                              py.data(), py.dir());
  }));
  expect_post_local_sgd_matches_python(py.dir());
}

std::vector<double> read_scales(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in).get<std::vector<double>>();
}

// CPU bfloat16 autocast and GradScaler (init 2**10, growth every 2 clean steps; rank 0's loss
// made inf at step 3, so every rank's averaged gradients are inf/nan there) against PyTorch's
// DDP under torch.autocast("cpu", bfloat16) with torch.amp.GradScaler("cpu"): the same scale
// after every step, the same parameters. PyTorch 1.13 has no CPU GradScaler (its GradScaler is
// CUDA-only): on that build the test compares autocast alone.
TEST(DdpAmpAgainstPython, AutocastAndGradScalerGiveSameScalesAndParameters) {
  DPX_SKIP_WITHOUT_PYTHON();
  const bool scaler = test::python_runs(DPX_PYTHON, "import torch; torch.amp.GradScaler(\"cpu\")");
  constexpr int kInfStep = 3;
  PythonRun py(std::string(R"(, "amp": {"init_scale": 1024, "growth_interval": 2, "scaler": )") +
               (scaler ? R"(true, "inf_steps": [3]})" : R"(false, "inf_steps": []})"));
  ASSERT_TRUE(py.ok()) << "python reference failed:\n" << py.log();
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(kWorld, [&](int rank) {
    torch::set_num_threads(1);
    auto pg = new_process_group("gloo", server.client(), rank, kWorld);
    auto net = start_model(rank, py.init());
    DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(ddp->parameters(), torch::optim::SGDOptions(kLr).momentum(kMomentum));
    GradScaler gs({.init_scale = 1024, .growth_interval = 2, .enabled = scaler}, pg);
    nlohmann::json scales = nlohmann::json::array();
    for (int s = 0; s < kSteps; ++s) {
      auto b = test::slice(py.data()[s], rank, kWorld);
      opt.zero_grad();
      torch::Tensor loss;
      {
        AutocastGuard autocast({.device_type = at::kCPU, .dtype = at::kBFloat16});
        loss = torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y);
      }
      if (scaler && rank == 0 && s == kInfStep) loss = loss * std::numeric_limits<float>::infinity();
      gs.scale(loss).backward();
      EXPECT_EQ(gs.step(opt), !scaler || s != kInfStep) << "step " << s;
      gs.update();
      scales.push_back(gs.get_scale());
    }
    if (rank == 0) {
      write_raw(py.dir() + "/dpx_final.bin", flat_params(net));
      std::ofstream(py.dir() + "/dpx_scales.json") << scales.dump();
    }
  }));
  expect_same_params(py.dir() + "/python_final.bin", py.dir() + "/dpx_final.bin");
  if (scaler) {
    EXPECT_EQ(read_scales(py.dir() + "/dpx_scales.json"),
              (std::vector<double>{1024, 2048, 2048, 1024, 1024, 2048}));
    EXPECT_EQ(read_scales(py.dir() + "/dpx_scales.json"),
              read_scales(py.dir() + "/python_scales.json"));
  }
}

// A sparse Embedding feeding a Linear: Python's EmbNet in ddp_reference.py.
constexpr std::int64_t kVocab = 40, kDim = 6, kClasses = 4, kTokens = 5;
struct EmbNetImpl : torch::nn::Module {
  EmbNetImpl() {
    emb = register_module(
        "emb", torch::nn::Embedding(torch::nn::EmbeddingOptions(kVocab, kDim).sparse(true)));
    fc = register_module("fc", torch::nn::Linear(kDim, kClasses));
  }
  torch::Tensor forward(const torch::Tensor& ids) { return fc(emb(ids).sum(1)); }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(EmbNet);

torch::Tensor flat_params(EmbNet& m) {
  std::vector<torch::Tensor> flat;
  for (const auto& p : m->parameters()) flat.push_back(p.detach().reshape({-1}));
  return torch::cat(flat);
}

// Sparse gradients (their own buckets, all-gathered) against PyTorch's DDP, whose Gloo backend
// reduces them with its sparse all-reduce: plain SGD, so the sparse rows are the only path.
TEST(SparseDdpAgainstPython, SameFinalParameters) {
  DPX_SKIP_WITHOUT_PYTHON();
  test::TempDir scratch;
  const std::string& dir = scratch.path();
  torch::manual_seed(4243);
  const auto ids = torch::randint(kVocab, {kSteps, kWorld * kPerRank, kTokens}, torch::kLong);
  const auto labels = torch::randint(kClasses, {kSteps, kWorld * kPerRank}, torch::kLong);
  torch::manual_seed(22);
  EmbNet init;
  {
    std::ofstream meta(dir + "/meta.json");
    meta << "{\"world\": " << kWorld << ", \"per_rank\": " << kPerRank << ", \"steps\": "
         << kSteps << ", \"lr\": " << kLr << ", \"momentum\": 0, \"sample_shape\": ["
         << kTokens << "], \"params\": [[\"emb.weight\", [" << kVocab << ", " << kDim
         << "]], [\"fc.weight\", [" << kClasses << ", " << kDim << "]], [\"fc.bias\", ["
         << kClasses << "]]], \"embedding\": {\"vocab\": " << kVocab << ", \"dim\": " << kDim
         << ", \"classes\": " << kClasses << ", \"tokens\": " << kTokens << "}}\n";
  }
  write_raw(dir + "/init.bin", flat_params(init));
  write_raw(dir + "/x.bin", ids);
  write_raw(dir + "/y.bin", labels);
  ASSERT_TRUE(run_reference(dir)) << "python reference failed:\n"
                                  << test::read_file(dir + "/python.log");
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(kWorld, [&](int rank) {
    torch::set_num_threads(1);
    auto pg = new_process_group("gloo", server.client(), rank, kWorld);
    auto net = start_model(rank, init);
    DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(ddp->parameters(), kLr);
    for (int s = 0; s < kSteps; ++s) {
      const auto x = ids[s].narrow(0, rank * kPerRank, kPerRank);
      const auto y = labels[s].narrow(0, rank * kPerRank, kPerRank);
      opt.zero_grad();
      torch::nn::functional::cross_entropy(ddp->forward(x), y).backward();
      EXPECT_TRUE(net->emb->weight.grad().is_sparse());
      opt.step();
    }
    if (rank == 0) write_raw(dir + "/dpx_final.bin", flat_params(net));
  }));
  expect_same_params(dir + "/python_final.bin", dir + "/dpx_final.bin");
}

}  // namespace
}  // namespace dpx::ddp_python_test
