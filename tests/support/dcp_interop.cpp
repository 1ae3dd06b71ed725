#include "support/dcp_interop.h"

#include <gtest/gtest.h>

#include <fstream>

#include "dpx/algorithms/zero_redundancy_optimizer.h"
#include "dpx/checkpoint/dcp.h"
#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/checkpoint/python_format.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/fsdp/fully_shard.h"
#include "support/checkpoint_files.h"
#include "support/dcp_resume.h"
#include "support/python_oracle.h"

namespace dpx::test {

torch::optim::AdamOptions dcp_oracle_adam() {
  return torch::optim::AdamOptions(0.05).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.1);
}

void dcp_adam_steps(torch::nn::Sequential& m, torch::optim::Optimizer& opt, int steps) {
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    m->forward(dcp_optim_batch()).pow(2).sum().backward();
    opt.step();
  }
}

void dcp_save_for_pytorch(const std::shared_ptr<ProcessGroup>& pg, const std::string& dir) {
  const std::string world = std::to_string(pg->size());
  auto whole = dcp_oracle_model();
  dcp_save_state_dict(*whole, dir + "/replicated-" + world, pg, {.prefix = "model."});
  auto sharded = dcp_oracle_model();
  fully_shard(sharded[3], pg);
  fully_shard(sharded.ptr(), pg);
  dcp_save_state_dict(*sharded, dir + "/sharded-" + world, nullptr, {.prefix = "model."});
  auto o = dcp_optim_model();
  fully_shard(o[2], pg);
  auto model = fully_shard(o, pg);
  torch::optim::Adam adam(o->parameters(), dcp_oracle_adam());
  for (int step = 0; step < 3; ++step) {
    adam.zero_grad();
    model(dcp_optim_batch()).pow(2).sum().backward();
    adam.step();
  }
  const std::string name = dir + "/adam-" + world;
  dcp_save_state_dict(*o, adam, name, nullptr, {.prefix = "model."});
  const auto optimizer = full_optimizer_state_dict(*o, adam);  // collective; rank 0 gets it
  if (pg->rank() == 0) torch_save(optimizer, name + "-optim.pt");

  auto z = dcp_optim_model();  // the same batch on every rank: the same gradients
  ZeroRedundancyOptimizer zero(z->parameters(), pg,
                               optimizer_factory<torch::optim::Adam>(dcp_oracle_adam()));
  dcp_adam_steps(z, zero, 3);
  const std::string zero_name = dir + "/zero-" + world;
  dcp_save_state_dict(*z, zero, zero_name, pg, {.prefix = "model."});
  if (pg->rank() == 0) {
    auto plain = dcp_optim_model();
    torch::optim::Adam plain_adam(plain->parameters(), dcp_oracle_adam());
    dcp_adam_steps(plain, plain_adam, 3);
    torch_save(full_optimizer_state_dict(*plain, plain_adam), zero_name + "-optim.pt");
  }
}

std::vector<std::string> dcp_optimizer_checkpoints(const std::vector<int>& worlds) {
  std::vector<std::string> names;
  for (const char* kind : {"adam-", "zero-"}) {
    for (const int world : worlds) names.push_back(kind + std::to_string(world));
  }
  return names;
}

std::vector<std::string> write_dcp_check_lists(const std::string& dir,
                                               const std::vector<int>& worlds,
                                               const std::vector<std::string>& training) {
  auto dict = c10::impl::GenericDict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, t] : state_dict(*dcp_oracle_model())) dict.insert(name, t);
  torch_save(dict, dir + "/expected.pt");
  std::vector<std::string> names;
  for (const int world : worlds) {
    for (const char* kind : {"sharded-", "replicated-"}) {
      names.push_back(kind + std::to_string(world));
    }
  }
  std::ofstream list(dir + "/checkpoints.txt");
  for (const auto& name : names) list << name << "\n";
  std::ofstream optim(dir + "/optim_checkpoints.txt");
  for (const auto& name : dcp_optimizer_checkpoints(worlds)) optim << name << "\n";
  std::ofstream steps(dir + "/training_checkpoints.txt");
  for (const auto& name : training) {
    optim << name << "\n";
    steps << name << "\n";
    std::ofstream(dir + "/" + name + "-progress.txt")
        << "epoch " << kDcpProgress.epoch << "\nstep " << kDcpProgress.step
        << "\nsampler_position " << kDcpProgress.sampler_position << "\n";
  }
  return names;
}

bool pytorch_checks_dcp(const std::string& dir, int world) {
  return run_python({.script = "dcp_oracle.py",
                     .args = {"check", dir, std::to_string(world)},
                     .timeout = std::chrono::seconds(180),
                     // PyTorch's gloo aborts its own process on a loaded machine
                     .attempts = 2})
      .ok();
}

void expect_dpx_reads_dcp_models_whole(const std::string& dir,
                                       const std::vector<std::string>& names) {
  const auto expected = state_dict(*dcp_oracle_model());
  for (const auto& name : names) {
    auto m = dcp_oracle_model();
    {
      torch::NoGradGuard no_grad;
      for (auto& p : m->parameters()) p.zero_();
    }
    dcp_load_state_dict(*m, dir + "/" + name, {.prefix = "model."});
    const auto ours = state_dict(*m);
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::equal(ours[i].second, expected[i].second)) << name << " " << ours[i].first;
    }
  }
}

void expect_dpx_reads_dcp_optimizers_whole(const std::string& dir,
                                           const std::vector<std::string>& names) {
  for (const auto& name : names) {
    auto o = dcp_optim_model();
    torch::optim::Adam adam(o->parameters());
    dcp_load_state_dict(*o, dir + "/" + name, {.prefix = "model."});
    dcp_load_optimizer_state_dict(*o, adam, dir + "/" + name);
    const auto want = torch_load(dir + "/" + name + "-optim.pt").toGenericDict();
    const auto got = full_optimizer_state_dict(*o, adam).toGenericDict();
    const auto want_state = want.at("state").toGenericDict();
    const auto got_state = got.at("state").toGenericDict();
    ASSERT_EQ(got_state.size(), want_state.size()) << name;
    for (const auto& param : want_state) {
      for (const auto& e : param.value().toGenericDict()) {
        const auto mine = got_state.at(param.key()).toGenericDict().at(e.key()).toTensor();
        EXPECT_TRUE(torch::equal(mine, e.value().toTensor()))
            << name << " " << param.key().toStringRef() << "." << e.key().toStringRef();
      }
    }
    const auto& options = static_cast<const torch::optim::AdamOptions&>(
        adam.param_groups()[0].options());
    EXPECT_DOUBLE_EQ(options.lr(), 0.05) << name;
    EXPECT_DOUBLE_EQ(options.weight_decay(), 0.1) << name;
  }
}

std::string pytorch_dcp_checkpoints() {
  return python_output_once(
      {.script = "dcp_oracle.py", .args = {"write"}, .timeout = std::chrono::seconds(240),
       .attempts = 2});
}

void expect_reshards_pytorch_dcp(const std::shared_ptr<ProcessGroup>& pg,
                                 const std::string& oracle) {
  const auto expected = torch_load(oracle + "/expected.pt").toGenericDict();
  auto m = dcp_oracle_model();
  fully_shard(m[3], pg);
  fully_shard(m.ptr(), pg);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : m->parameters()) p.zero_();
  }
  const auto result = dcp_load_state_dict(*m, oracle + "/three", {.prefix = "model."});
  EXPECT_TRUE(result.missing_keys.empty());
  for (const auto& [name, t] : full_state_dict(*m, {.rank0_only = false})) {
    EXPECT_TRUE(torch::equal(t, expected.at(name).toTensor())) << name << ": " << t;
  }
}

void expect_resumes_pytorch_fsdp2_adam(const std::shared_ptr<ProcessGroup>& pg,
                                       const std::string& oracle) {
  const auto expected = torch_load(oracle + "/adam_next.pt").toGenericDict();
  auto m = dcp_optim_model();
  fully_shard(m[2], pg);
  auto model = fully_shard(m, pg);
  torch::optim::Adam adam(m->parameters(), torch::optim::AdamOptions(1e-3));
  dcp_load_state_dict(*m, oracle + "/adam", {.prefix = "model."});
  dcp_load_optimizer_state_dict(*m, adam, oracle + "/adam");
  adam.zero_grad();
  model(dcp_optim_batch()).pow(2).sum().backward();
  adam.step();
  for (const auto& [name, t] : full_state_dict(*m, {.rank0_only = false})) {
    const auto want = expected.at(name).toTensor();
    EXPECT_TRUE(torch::allclose(t, want, 1e-5, 1e-6)) << name << ": " << t << " against " << want;
  }
}

}  // namespace dpx::test
