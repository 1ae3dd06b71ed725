// DCP checkpoints that PyTorch wrote (tests/python/dcp_oracle.py, run once for the suite): read
// whole into LibTorch modules, from one writer and from FSDP2's uneven and empty shards on three;
// and each broken or hostile variant refused with a CheckpointError naming what is wrong.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "support/checkpoint_files.h"
#include "dpx/checkpoint/dcp.h"
#include "dpx/checkpoint/python_format.h"
#include "dpx/runtime/files.h"

namespace {

// The oracle's model, its parameters zero until a checkpoint fills them.
torch::nn::Sequential oracle_model() {
  auto m = dpx::test::dcp_oracle_model();
  torch::NoGradGuard no_grad;
  for (auto& p : m->parameters()) p.zero_();
  return m;
}

class DcpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DPX_SKIP_UNLESS_PYTHON_HAS(DPX_PYTHON, "torch.distributed.checkpoint");
    // One run of the oracle for the whole suite, whichever process gets there first.
    if (dir_.empty()) {
      dir_ = dpx::test::python_output_once({.script = "dcp_oracle.py",
                                            .args = {"write"},
                                            .timeout = std::chrono::seconds(240),
                                            .attempts = 2});
    }
    ASSERT_FALSE(dir_.empty()) << "tests/python/dcp_oracle.py failed (its output is above)";
  }

  static std::string path(const std::string& name) { return dir_ + "/" + name; }

  // Every tensor of `module` equals PyTorch's, dtype included.
  static void expect_expected(const torch::nn::Module& module) {
    const auto expected = dpx::torch_load(path("expected.pt")).toGenericDict();
    const auto ours = dpx::state_dict(module);
    ASSERT_EQ(ours.size(), expected.size());
    for (const auto& [name, t] : ours) {
      const auto theirs = expected.at(name).toTensor();
      EXPECT_EQ(t.scalar_type(), theirs.scalar_type()) << name;
      EXPECT_TRUE(torch::equal(t, theirs)) << name << ": " << t << " against " << theirs;
    }
  }

  static inline std::string dir_;
};

TEST_F(DcpTest, LoadsACheckpointOfOneWriterIntoAModule) {
  auto m = oracle_model();
  const auto result = dpx::dcp_load_state_dict(*m, path("one"), {.prefix = "model."});
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  expect_expected(*m);
}

TEST_F(DcpTest, AssemblesFsdp2ShardsOfUnevenAndEmptySizes) {
  auto m = oracle_model();
  dpx::dcp_load_state_dict(*m, path("three"), {.prefix = "model."});
  expect_expected(*m);
}

TEST_F(DcpTest, ReadsTensorsUnderAPrefixAndLeavesObjectsOut) {
  std::vector<std::string> names;
  for (const auto& [name, t] : dpx::dcp_read_tensors(path("three"), "model.")) {
    names.push_back(name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"0.bias", "0.weight", "2.bias", "2.weight",
                                             "3.bias", "3.weight"}));
  for (const auto& [name, t] : dpx::dcp_read_tensors(path("one"))) {
    EXPECT_NE(name, "step") << "a non-tensor entry (BytesStorageMetadata) read as a tensor";
  }
}

TEST_F(DcpTest, StrictLoadingNamesWhatDoesNotMatch) {
  auto m = oracle_model();
  EXPECT_CHECKPOINT_ERROR(dpx::dcp_load_state_dict(*m, path("one")), "model.0.weight");
  auto bigger = oracle_model();
  bigger->push_back(torch::nn::Linear(5, 1));
  const auto result =
      dpx::dcp_load_state_dict(*bigger, path("one"), {.prefix = "model.", .strict = false});
  EXPECT_EQ(result.missing_keys, (std::vector<std::string>{"4.weight", "4.bias"}));
}

// PyTorch's FSDP2 + Adam of 3 ranks, 3 steps in (adam/), resumed on one process: the optimizer's
// state assembled whole from the shards and its hyper-parameters read (the optimizer is made
// with Adam's defaults), one more step lands on PyTorch's parameters after it (adam_next.pt).
TEST_F(DcpTest, ResumesPyTorchsFsdp2AdamOnOneProcess) {
  auto m = dpx::test::dcp_optim_model();
  torch::optim::Adam adam(m->parameters(), torch::optim::AdamOptions(1e-3));
  dpx::dcp_load_state_dict(*m, path("adam"), {.prefix = "model."});
  dpx::dcp_load_optimizer_state_dict(*m, adam, path("adam"));
  const auto& o = static_cast<const torch::optim::AdamOptions&>(adam.param_groups()[0].options());
  EXPECT_DOUBLE_EQ(o.lr(), 0.05);
  EXPECT_DOUBLE_EQ(std::get<0>(o.betas()), 0.8);
  EXPECT_DOUBLE_EQ(std::get<1>(o.betas()), 0.95);
  EXPECT_DOUBLE_EQ(o.eps(), 1e-6);
  EXPECT_DOUBLE_EQ(o.weight_decay(), 0.1);
  adam.zero_grad();
  m->forward(dpx::test::dcp_optim_batch()).pow(2).sum().backward();
  adam.step();
  const auto expected = dpx::torch_load(path("adam_next.pt")).toGenericDict();
  for (const auto& [name, t] : dpx::state_dict(*m)) {
    const auto want = expected.at(name).toTensor();
    EXPECT_TRUE(torch::allclose(t, want, 1e-5, 1e-6)) << name << ": " << t << " against " << want;
  }
}

TEST_F(DcpTest, RefusesAnotherOptimizersState) {
  auto m = dpx::test::dcp_optim_model();
  torch::optim::AdamW adamw(m->parameters());
  EXPECT_CHECKPOINT_ERROR(dpx::dcp_load_optimizer_state_dict(*m, adamw, path("adam")),
                          "optim.param_groups.0.decoupled_weight_decay is False");
  torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.1));
  EXPECT_CHECKPOINT_ERROR(dpx::dcp_load_optimizer_state_dict(*m, sgd, path("adam")),
                          "optim.param_groups.0.momentum is missing");
  torch::nn::Sequential narrower(torch::nn::Linear(6, 5), torch::nn::Tanh(),
                                 torch::nn::Linear(5, 2));
  torch::optim::Adam adam(narrower->parameters());
  EXPECT_CHECKPOINT_ERROR(dpx::dcp_load_optimizer_state_dict(*narrower, adam, path("adam")),
                          "optim.state.0.weight.exp_avg has shape [7, 6] there");
  auto more = oracle_model();  // the checkpoint's parameters and two more
  torch::optim::Adam adam_more(more->parameters());
  EXPECT_CHECKPOINT_ERROR(dpx::dcp_load_optimizer_state_dict(*more, adam_more, path("adam")),
                          "optim.param_groups.0.params names 0.weight, 0.bias, 2.weight, 2.bias;");
  EXPECT_CHECKPOINT_ERROR(dpx::dcp_load_optimizer_state_dict(*m, adam, path("one")),
                          "no optim.param_groups.* entries");
}

TEST_F(DcpTest, RefusesBrokenAndHostileCheckpoints) {
  const std::pair<const char*, const char*> cases[] = {
      {"overlap", "overlap"},
      {"outside", "reaches outside the tensor"},
      {"huge", "overflows"},
      {"uncovered", "cover 42 of its 48 elements"},
      {"traversal", "not a plain name"},
      {"missing_file", "is missing"},
      {"truncated", "cut short"},
      {"no_storage", "no storage entry"},
      {"global", "refusing to load global 'os.system'"},
      {"deep", "nested deeper than"},
  };
  for (const auto& [name, text] : cases) {
    SCOPED_TRACE(name);
    auto m = oracle_model();
    EXPECT_CHECKPOINT_ERROR(
        dpx::dcp_load_state_dict(*m, path(std::string("hostile_") + name), {.prefix = "model."}),
        text);
  }
  EXPECT_FALSE(dpx::path_exists(path("pwned"))) << "the hostile pickle ran";
  auto m = oracle_model();
  EXPECT_CHECKPOINT_ERROR(dpx::dcp_load_state_dict(*m, path("no_such_checkpoint")),
                          "no .metadata file");
}

}  // namespace
