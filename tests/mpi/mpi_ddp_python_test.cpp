// DDP's join() with uneven inputs, the PowerSGD hook and post-local SGD on the mpi backend
// against PyTorch's Python DDP (support/ddp_python.h), one process per rank under mpirun: rank 0
// runs PyTorch's ranks and tells the others where their results are, every rank trains with dpx
// and writes its result beside them, and rank 0 compares. The join cases run at 3 ranks (CTest
// mpi.np3.ddp_python), the others at 2 (mpi.np2.ddp_python); each is skipped at other sizes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>

#include "mpi/mpi_group.h"
#include "support/ddp_python.h"
#include "support/ddp_python_run.h"

namespace dpx::mpi_test {
namespace {

using namespace test::python;  // the oracle's helpers and constants

struct Comparison {
  int world;
  std::string meta;  // PythonRun's extra_meta
  std::vector<std::string> modules;  // what the oracle's Python must import besides torch
  // A rank's dpx training: its group, rank 0's initial model, the data, the oracle's folder.
  std::function<void(const std::shared_ptr<ProcessGroup>&, test::Cnn&,
                     const std::vector<test::Batch>&, const std::string&)>
      train;
  std::function<void(const std::string&)> check;  // on rank 0, once every rank has trained
};

void expect_matches_python(const Comparison& c) {
  // The others wait in the broadcast below while rank 0 runs PyTorch (up to 2 x 120 s).
  auto pg = mpi_group(std::chrono::minutes(5));
  if (pg->size() != c.world) GTEST_SKIP() << "runs under mpirun -np " << c.world;
  // Every rank decides alike: one machine, one environment.
  DPX_SKIP_WITHOUT_PYTHON();
  for (const auto& m : c.modules) DPX_SKIP_UNLESS_PYTHON_HAS(DPX_PYTHON, m);
  torch::set_num_threads(1);  // the ranks share the machine's cores
  std::optional<PythonRun> py;
  // The oracle's folder, "" when PyTorch failed: 4096 bytes, as int32 (broadcast's dtypes).
  auto where = at::zeros({1024}, at::kInt);
  if (pg->rank() == 0) {
    // Whatever fails here, rank 0 still joins the broadcast (with ""), so the others fail at
    // once instead of waiting out the group's timeout.
    try {
      py.emplace(c.meta, c.world);
      if (py->ok()) {
        std::strncpy(static_cast<char*>(where.data_ptr()), py->dir().c_str(), 4095);
      } else {
        ADD_FAILURE() << "python reference failed:\n" << py->log();
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "preparing or running PyTorch's DDP failed: " << e.what();
    }
  }
  pg->broadcast(where, {0})->wait();
  const std::string dir(static_cast<const char*>(where.data_ptr()));
  ASSERT_FALSE(dir.empty()) << "PyTorch's DDP run failed (rank 0's log says why)";
  test::Cnn others;  // start_model reads rank 0's initial model alone
  c.train(pg, py ? py->init() : others, py ? py->data() : python_data(c.world), dir);
  pg->barrier()->wait();  // every rank's result is in `dir`
  if (pg->rank() == 0) c.check(dir);
}

TEST(MpiDdpPython, JoinBuffersFromTheHighestRankWithData) {
  expect_matches_python({kJoinWorld, join_meta(true), {},
                         [](auto& pg, auto& init, auto& data, auto& dir) {
                           train_in_join(pg, init, data, /*broadcast_buffers=*/true, dir);
                         },
                         [](auto& dir) { expect_join_matches_python(dir, true); }});
}

TEST(MpiDdpPython, JoinWithoutBroadcastBuffersKeepsEachRanksOwn) {
  expect_matches_python({kJoinWorld, join_meta(false), {},
                         [](auto& pg, auto& init, auto& data, auto& dir) {
                           train_in_join(pg, init, data, /*broadcast_buffers=*/false, dir);
                         },
                         [](auto& dir) { expect_join_matches_python(dir, false); }});
}

TEST(MpiDdpPython, PowerSgdSameFinalParameters) {
  expect_matches_python({kWorld, kPowerSgdMeta, {"numpy"},  // PyTorch's powerSGD_hook needs it
                         train_with_powersgd, [](auto& dir) {
                           expect_same_params(dir + "/python_final.bin", dir + "/dpx_final.bin");
                         }});
}

TEST(MpiDdpPython, PostLocalSgdSameParametersOnEveryRank) {
  expect_matches_python(
      {kWorld, kPostLocalSgdMeta, {}, train_with_post_local_sgd,
       expect_post_local_sgd_matches_python});
}

}  // namespace
}  // namespace dpx::mpi_test
