// dpx::GradScaler against PyTorch's GradScaler on one gradient sequence, and its cross-rank
// agreement on inf/nan (Note [GradScaler across ranks]) on every backend.
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <limits>

#include "dpx/amp/grad_scaler.h"
#include "support/harness.h"
#include "support/python_oracle.h"
#include "support/launcher_harness.h"

namespace dpx {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// 12 steps of random gradients with an inf at step 3, a nan at step 7 and a -inf at step 8:
// every scale change PyTorch makes (growth every 3 clean steps, backoff) and the skips.
TEST(GradScalerAgainstPython, SameScalesSkipsAndParameters) {
  torch::manual_seed(7);
  auto grads = torch::randn({12, 5});
  grads[3][1] = kInf;
  grads[7][4] = std::numeric_limits<float>::quiet_NaN();
  grads[8][0] = -kInf;
  const auto p0 = torch::randn({5});
  nlohmann::json spec = {{"init_scale", 4096.0}, {"growth_interval", 3}, {"lr", 0.25}};
  spec["p"] = std::vector<float>(p0.data_ptr<float>(), p0.data_ptr<float>() + 5);
  for (int s = 0; s < 12; ++s) {
    nlohmann::json row = nlohmann::json::array();
    for (int i = 0; i < 5; ++i) {
      const float v = grads[s][i].item<float>();
      row.push_back(std::isnan(v) ? nlohmann::json("nan")
                    : std::isinf(v) ? nlohmann::json(v > 0 ? "inf" : "-inf")
                                    : nlohmann::json(v));
    }
    spec["grads"].push_back(row);
  }
  test::TempDir dir;
  std::ofstream(dir.path() + "/in.json") << spec.dump();
  test::PythonScript script;
  script.script = "grad_scaler_reference.py";
  script.args = {dir / "in.json", dir / "out.json"};
  script.timeout = std::chrono::seconds(60);
  script.log = dir / "log";
  const auto run = test::run_python(script);
  if (run.exit_code == 3) {
    GTEST_SKIP() << "SKIPPED: PyTorch " DPX_TORCH_VERSION " has no CPU GradScaler (it came with "
                    "2.3); GradScaler.* checks the algorithm's exact values on this build";
  }
  ASSERT_TRUE(run.ok()) << test::read_file(dir / "log");
  std::ifstream in(dir.path() + "/out.json");
  const auto python = nlohmann::json::parse(in);

  auto p = p0.clone().requires_grad_(true);
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.25));
  GradScaler scaler({.init_scale = 4096, .growth_interval = 3});
  for (int s = 0; s < 12; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    opt.zero_grad();
    scaler.scale((p * grads[s]).sum()).backward();
    EXPECT_EQ(scaler.step(opt), python["stepped"][s].get<bool>());
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), python["scales"][s].get<double>());
    EXPECT_EQ(scaler.state_dict()._growth_tracker, python["trackers"][s].get<std::int64_t>());
  }
  const auto theirs = python["p"].get<std::vector<float>>();
  EXPECT_TRUE(p.detach().equal(torch::tensor(theirs))) << p << "\n" << torch::tensor(theirs);
}

// A gradient that is inf on rank 1 alone (no DDP between them): with the group every rank skips
// that step and keeps the same scale; without it (PyTorch's behaviour) rank 0 steps alone.
TEST(GradScalerAcrossRanks, ARankLocalInfMakesEveryRankSkip) {
  test::on_each_backend(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    for (bool agree : {true, false}) {
      auto p = torch::ones({3}).requires_grad_(true);
      torch::optim::SGD opt({p}, torch::optim::SGDOptions(1.0));
      GradScaler scaler({.init_scale = 256, .growth_interval = 100}, agree ? pg : nullptr);
      std::vector<bool> stepped;
      for (int s = 0; s < 3; ++s) {
        auto g = torch::full({3}, 0.5f);
        if (s == 1 && rank == 1) g[2] = kInf;
        opt.zero_grad();
        scaler.scale((p * g).sum()).backward();
        stepped.push_back(scaler.step(opt));
        scaler.update();
      }
      if (agree || rank == 1) {
        EXPECT_EQ(stepped, (std::vector<bool>{true, false, true})) << "agree " << agree;
        EXPECT_EQ(scaler.get_scale(), 128.0);
        EXPECT_TRUE(p.detach().equal(torch::zeros({3})));  // two steps of 0.5
      } else {
        EXPECT_EQ(stepped, (std::vector<bool>{true, true, true}));
        EXPECT_EQ(scaler.get_scale(), 256.0);
      }
    }
  });
}

}  // namespace
}  // namespace dpx
