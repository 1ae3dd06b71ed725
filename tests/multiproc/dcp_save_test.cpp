// DCP checkpoints written by dpx: fully_shard modules (each rank its rows, uneven and empty
// shards, a bfloat16 unit) and replicated ones (each tensor written once), and a fully_shard
// model with its Adam's state, on 2 and 3 ranks, read by PyTorch 2.15's dcp.load into FSDP2
// models on 1, 2, 3 and 4 ranks (tests/python/dcp_oracle.py check: one Python launch per world
// size for every checkpoint) and by dpx itself (the Adam state too, on one process); PyTorch's
// FSDP2 checkpoint resharded into dpx's fully_shard; PyTorch's FSDP2 + Adam checkpoint resumed
// by dpx's fully_shard on other world sizes; and a save cut short by a killed rank, which leaves
// no .metadata.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "dpx/algorithms/zero_redundancy_optimizer.h"
#include "dpx/checkpoint/dcp.h"
#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/checkpoint/python_format.h"
#include "dpx/comm/init.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/fsdp/fully_shard.h"
#include "dpx/runtime/files.h"
#include "support/checkpoint_files.h"
#include "support/harness.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"

namespace dpx::dcp_save_test {
namespace {

using test::dcp_oracle_model;

// `world` ranks save the oracle model to dir/sharded-<world> (fully_shard) and
// dir/replicated-<world> (the whole module on every rank, as under DDP); and the optimizer's
// model, fully_shard and 3 steps of Adam in, with its Adam to dir/adam-<world>, its state whole
// to dir/adam-<world>-optim.pt for PyTorch to compare with; and the optimizer's model whole on
// every rank, 3 steps of a ZeroRedundancyOptimizer over Adam in (each rank the state of its
// share), to dir/zero-<world>, with a plain Adam's state after the same steps in
// dir/zero-<world>-optim.pt.
torch::optim::AdamOptions oracle_adam() {
  return torch::optim::AdamOptions(0.05).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.1);
}

void adam_steps(torch::nn::Sequential& m, torch::optim::Optimizer& opt, int steps) {
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    m->forward(test::dcp_optim_batch()).pow(2).sum().backward();
    opt.step();
  }
}

void save_on(int world, const std::string& dir) {
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(world, [&](int rank) {
    torch::set_num_threads(1);
    auto pg = new_process_group("shm", server.client(), rank, world);
    auto whole = dcp_oracle_model();
    dcp_save_state_dict(*whole, dir + "/replicated-" + std::to_string(world), pg,
                        {.prefix = "model."});
    auto sharded = dcp_oracle_model();
    fully_shard(sharded[3], pg);
    fully_shard(sharded.ptr(), pg);
    dcp_save_state_dict(*sharded, dir + "/sharded-" + std::to_string(world), nullptr,
                        {.prefix = "model."});
    auto o = test::dcp_optim_model();
    fully_shard(o[2], pg);
    auto model = fully_shard(o, pg);
    torch::optim::Adam adam(o->parameters(),
                            torch::optim::AdamOptions(0.05).betas({0.8, 0.95}).eps(1e-6)
                                .weight_decay(0.1));
    for (int step = 0; step < 3; ++step) {
      adam.zero_grad();
      model(test::dcp_optim_batch()).pow(2).sum().backward();
      adam.step();
    }
    const std::string name = dir + "/adam-" + std::to_string(world);
    dcp_save_state_dict(*o, adam, name, nullptr, {.prefix = "model."});
    const auto optimizer = full_optimizer_state_dict(*o, adam);  // collective; rank 0 gets it
    if (rank == 0) torch_save(optimizer, name + "-optim.pt");

    auto z = test::dcp_optim_model();  // the same batch on every rank: the same gradients
    ZeroRedundancyOptimizer zero(z->parameters(), pg,
                                 optimizer_factory<torch::optim::Adam>(oracle_adam()));
    adam_steps(z, zero, 3);
    const std::string zero_name = dir + "/zero-" + std::to_string(world);
    dcp_save_state_dict(*z, zero, zero_name, pg, {.prefix = "model."});
    if (rank == 0) {
      auto plain = test::dcp_optim_model();
      torch::optim::Adam plain_adam(plain->parameters(), oracle_adam());
      adam_steps(plain, plain_adam, 3);
      torch_save(full_optimizer_state_dict(*plain, plain_adam), zero_name + "-optim.pt");
    }
  }));
}

TEST(DcpSave, PyTorchLoadsWhatDpxWroteOnAnyWorldSize) {
  DPX_SKIP_UNLESS_PYTHON_HAS(DPX_PYTHON, "torch.distributed.checkpoint");
  test::TempDir dir;
  {
    auto dict = c10::impl::GenericDict(c10::StringType::get(), c10::TensorType::get());
    for (const auto& [name, t] : state_dict(*dcp_oracle_model())) dict.insert(name, t);
    torch_save(dict, dir / "expected.pt");
  }
  std::vector<std::string> names;
  for (const int world : {2, 3}) {
    save_on(world, dir.path());
    for (const char* kind : {"sharded-", "replicated-"}) names.push_back(kind + std::to_string(world));
  }
  {
    std::ofstream list(dir / "checkpoints.txt");
    for (const auto& name : names) list << name << "\n";
    std::ofstream optim(dir / "optim_checkpoints.txt");
    optim << "adam-2\nadam-3\nzero-2\nzero-3\n";
  }
  for (const int world : {1, 2, 3, 4}) {
    EXPECT_TRUE(test::run_python({.script = "dcp_oracle.py",
                                  .args = {"check", dir.path(), std::to_string(world)},
                                  .timeout = std::chrono::seconds(180),
                                  // PyTorch's gloo aborts its own process on a loaded machine
                                  .attempts = 2})
                    .ok())
        << "PyTorch's dcp.load on " << world << " rank(s) (its output is above)";
  }
  for (const auto& name : names) {  // dpx reads its own checkpoints whole, too
    auto m = dcp_oracle_model();
    {
      torch::NoGradGuard no_grad;
      for (auto& p : m->parameters()) p.zero_();
    }
    dcp_load_state_dict(*m, dir / name, {.prefix = "model."});
    const auto expected = state_dict(*dcp_oracle_model());
    const auto ours = state_dict(*m);
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::equal(ours[i].second, expected[i].second)) << name << " " << ours[i].first;
    }
  }
  for (const char* name : {"adam-2", "adam-3", "zero-2", "zero-3"}) {  // and the optimizer's, whole
    auto o = test::dcp_optim_model();
    torch::optim::Adam adam(o->parameters());
    dcp_load_state_dict(*o, dir / name, {.prefix = "model."});
    dcp_load_optimizer_state_dict(*o, adam, dir / name);
    const auto want = torch_load(dir / (std::string(name) + "-optim.pt")).toGenericDict();
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

// A ZeroRedundancyOptimizer's DCP checkpoint of 3 ranks resumes in ZeroRedundancyOptimizers of
// 2 (each rank the state of its new share, and the checkpoint's hyper-parameters, not the ones
// it was made with): their next step is a plain Adam's fourth, to the bit.
TEST(DcpSave, ZeroResumesOnAnotherWorldSizeAsAPlainAdamContinues) {
  test::TempDir dir;
  save_on(3, dir.path());
  auto plain = test::dcp_optim_model();
  torch::optim::Adam plain_adam(plain->parameters(), oracle_adam());
  adam_steps(plain, plain_adam, 4);
  torch::save(plain->parameters(), dir / "after_4.pt");
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(2, [&](int rank) {
    torch::set_num_threads(1);
    auto pg = new_process_group("shm", server.client(), rank, 2);
    auto z = test::dcp_optim_model();
    ZeroRedundancyOptimizer zero(
        z->parameters(), pg, optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions()));
    dcp_load_state_dict(*z, dir / "zero-3", {.prefix = "model."});
    dcp_load_optimizer_state_dict(*z, zero, dir / "zero-3");
    adam_steps(z, zero, 1);
    std::vector<torch::Tensor> want;
    torch::load(want, dir / "after_4.pt");
    const auto got = z->parameters();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(torch::equal(got[i], want[i])) << "parameter " << i << " on rank " << rank;
    }
  }));
}

// The folder of PyTorch's checkpoints (dcp_oracle.py write, run once per build); "" if it failed.
std::string pytorch_checkpoints() {
  return test::python_output_once(
      {.script = "dcp_oracle.py", .args = {"write"}, .timeout = std::chrono::seconds(240),
       .attempts = 2});
}

// body(rank, pg) on 2 and then 4 ranks over shm, each rank a process of its own.
template <typename Body>
void on_two_and_four_ranks(Body body) {
  for (const int world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    test::StoreServer server;
    test::expect_all_ok(test::run_processes(world, [&](int rank) {
      torch::set_num_threads(1);
      body(rank, new_process_group("shm", server.client(), rank, world));
    }));
  }
}

// PyTorch's FSDP2 checkpoint of 3 ranks (dcp_oracle.py write), resharded into dpx's fully_shard
// on 2 and 4 ranks: every rank reads only its rows; gathered whole, they are PyTorch's values.
TEST(DcpSave, DpxReshardsAPyTorchCheckpointOnOtherWorldSizes) {
  DPX_SKIP_UNLESS_PYTHON_HAS(DPX_PYTHON, "torch.distributed.checkpoint");
  const std::string oracle = pytorch_checkpoints();
  ASSERT_FALSE(oracle.empty()) << "tests/python/dcp_oracle.py write failed (output above)";
  const auto expected = torch_load(oracle + "/expected.pt").toGenericDict();
  on_two_and_four_ranks([&](int, std::shared_ptr<ProcessGroup> pg) {
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
  });
}

// PyTorch's FSDP2 + Adam of 3 ranks, 3 steps in (dcp_oracle.py write, adam/), resumed by dpx's
// fully_shard on 2 and 4 ranks (uneven and empty shards of the state too): each rank reads the
// rows of its shards of exp_avg and exp_avg_sq, and the hyper-parameters (the optimizer is made
// with Adam's defaults); one more step on the same batch lands on PyTorch's parameters after it.
TEST(DcpSave, DpxResumesPyTorchsFsdp2AdamOnOtherWorldSizes) {
  DPX_SKIP_UNLESS_PYTHON_HAS(DPX_PYTHON, "torch.distributed.checkpoint");
  const std::string oracle = pytorch_checkpoints();
  ASSERT_FALSE(oracle.empty()) << "tests/python/dcp_oracle.py write failed (output above)";
  const auto expected = torch_load(oracle + "/adam_next.pt").toGenericDict();
  on_two_and_four_ranks([&](int, std::shared_ptr<ProcessGroup> pg) {
    auto m = test::dcp_optim_model();
    fully_shard(m[2], pg);
    auto model = fully_shard(m, pg);
    torch::optim::Adam adam(m->parameters(), torch::optim::AdamOptions(1e-3));
    dcp_load_state_dict(*m, oracle + "/adam", {.prefix = "model."});
    dcp_load_optimizer_state_dict(*m, adam, oracle + "/adam");
    adam.zero_grad();
    model(test::dcp_optim_batch()).pow(2).sum().backward();
    adam.step();
    for (const auto& [name, t] : full_state_dict(*m, {.rank0_only = false})) {
      const auto want = expected.at(name).toTensor();
      EXPECT_TRUE(torch::allclose(t, want, 1e-5, 1e-6)) << name << ": " << t << " against "
                                                        << want;
    }
  });
}

TEST(DcpSave, ARankKilledMidWriteLeavesNoCheckpoint) {
  test::TempDir dir;
  const std::string ckpt = dir / "step-2";
  test::StoreServer server;
  const auto results = test::run_processes(2, [&](int rank) {
    torch::set_num_threads(1);
    auto pg = new_process_group("shm", server.client(), rank, 2,
                                test::with_timeout(std::chrono::seconds(5)));
    auto m = dcp_oracle_model();
    DcpSaveOptions options{.prefix = "model.", .timeout = std::chrono::seconds(5)};
    if (rank == 1) options.write.after_partial_write = [] { test::kill_this_rank(); };
    dcp_save_state_dict(*m, ckpt, pg, options);
  });
  ASSERT_EQ(results.size(), 2u);
  EXPECT_NE(results[0].exit_code, 0) << "rank 0 returned from a save its peer never finished";
  EXPECT_FALSE(path_exists(ckpt + "/.metadata"));
  auto m = dcp_oracle_model();
  try {
    dcp_load_state_dict(*m, ckpt);
    ADD_FAILURE() << "a checkpoint cut short loaded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("no .metadata file"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpx::dcp_save_test
