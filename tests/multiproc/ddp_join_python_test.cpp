// dpx DDP under join() against PyTorch's Python DDP (tests/python/ddp_reference.py) on 3 ranks
// with uneven inputs (2, 5 and 4 steps) and the BatchNorm CNN: every rank's parameters, their
// gradients and its buffers (running mean and variance, num_batches_tracked exactly) as PyTorch
// leaves them, with broadcast_buffers on and off (Note [Buffers under join] in
// src/ddp/ddp_base.cpp), on the shm, gloo and hierarchical groups (support/ddp_python.h; the
// mpi group's: tests/mpi/mpi_ddp_python_test.cpp).
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/ddp_python.h"
#include "support/ddp_python_run.h"
#include "support/harness.h"

namespace dpx::ddp_join_python_test {
namespace {

using namespace test::python;  // the oracle's helpers and constants

void join_against_python(bool broadcast) {
  PythonRun py(join_meta(broadcast), kJoinWorld);
  ASSERT_TRUE(py.ok()) << "python reference failed:\n" << py.log();
  for (const std::string backend : {"shm", "gloo", "hierarchical"}) {
    SCOPED_TRACE("backend " + backend);
    test::StoreServer server;
    test::expect_all_ok(test::run_processes(kJoinWorld, [&](int rank) {
      torch::set_num_threads(1);
      auto pg = new_process_group(backend, server.client(), rank, kJoinWorld);
      train_in_join(pg, py.init(), py.data(), broadcast, py.dir());
    }));
    expect_join_matches_python(py.dir(), broadcast);
  }
}

TEST(DdpJoinAgainstPython, BuffersFromTheHighestRankWithData) {
  DPX_SKIP_WITHOUT_PYTHON();
  join_against_python(/*broadcast=*/true);
}

TEST(DdpJoinAgainstPython, NoBroadcastBuffersKeepsEachRanksOwn) {
  DPX_SKIP_WITHOUT_PYTHON();
  join_against_python(/*broadcast=*/false);
}

}  // namespace
}  // namespace dpx::ddp_join_python_test
