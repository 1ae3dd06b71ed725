// DCP checkpoints between dpx on the mpi backend and PyTorch 2.15's torch.distributed.checkpoint,
// one process per rank under mpirun, both ways: PyTorch reads what this world's ranks wrote, and
// this world's ranks reshard and resume PyTorch's FSDP2 checkpoints of 3 ranks. The checks are
// those forked processes make on shm (tests/multiproc/dcp_save_test.cpp,
// dcp_checkpointer_test.cpp; support/dcp_interop.h); rank 0 runs PyTorch. CTest runs them at 2
// ranks (mpi.np2.checkpoint_python), so that both ways cross world sizes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <optional>
#include <string>

#include "mpi/from_rank0.h"
#include "mpi/mpi_group.h"
#include "support/dcp_interop.h"
#include "support/dcp_resume.h"
#include "support/python_oracle.h"

namespace dpx::mpi_test {
namespace {

// Why this machine's Python cannot run the oracle, or "": asked once per process (each asking
// starts a Python).
const std::string& why_no_dcp() {
  static const std::string why = test::why_python_lacks(DPX_PYTHON, "torch.distributed.checkpoint");
  return why;
}

// The others wait in a barrier or a broadcast while rank 0 runs PyTorch (PyTorch's own timeouts
// bound it).
std::shared_ptr<ProcessGroup> patient_group() { return mpi_group(std::chrono::minutes(5)); }

// The world's ranks save the oracle model sharded and whole, fully_shard's and ZeRO's Adam, and a
// DcpCheckpointer's step folder; PyTorch's dcp.load reads them all on one rank and every sharded
// one on 3 (FSDP2), and dpx reads its own whole on rank 0.
TEST(MpiCheckpointPython, PyTorchLoadsWhatDpxWrote) {
  if (const auto& why = why_no_dcp(); !why.empty()) GTEST_SKIP() << why;
  auto pg = patient_group();
  std::optional<test::TempDir> own;
  const auto dir = shared_temp_dir(pg, own);
  ASSERT_FALSE(dir.empty());
  test::dcp_save_for_pytorch(pg, dir);
  test::dcp_train_and_save(pg, /*sharded=*/true, dir + "/ckpt");
  pg->barrier()->wait();  // every rank's files are written
  if (pg->rank() == 0) {
    // Whatever fails here, rank 0 still reaches the barrier (the others would wait it out).
    try {
      const auto names = test::write_dcp_check_lists(dir, {pg->size()}, {"ckpt/dcp-3"});
      for (const int world : {1, 3}) {
        EXPECT_TRUE(test::pytorch_checks_dcp(dir, world))
            << "PyTorch's dcp.load on " << world << " rank(s) (its output is above)";
      }
      test::expect_dpx_reads_dcp_models_whole(dir, names);
      test::expect_dpx_reads_dcp_optimizers_whole(dir,
                                                  test::dcp_optimizer_checkpoints({pg->size()}));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "checking the checkpoints failed: " << e.what();
    }
  }
  pg->barrier()->wait();  // rank 0's folder outlives the others' writes
}

// PyTorch's checkpoints of 3 ranks (dcp_oracle.py write, once per build): the folder, or "".
std::string pytorch_checkpoints(const std::shared_ptr<ProcessGroup>& pg) {
  return from_rank0(pg, [] { return test::pytorch_dcp_checkpoints(); });
}

// Every rank reads only its rows of PyTorch's FSDP2 checkpoint; gathered whole, they are
// PyTorch's values.
TEST(MpiCheckpointPython, DpxReshardsAPyTorchCheckpoint) {
  if (const auto& why = why_no_dcp(); !why.empty()) GTEST_SKIP() << why;
  auto pg = patient_group();
  const auto oracle = pytorch_checkpoints(pg);
  ASSERT_FALSE(oracle.empty()) << "tests/python/dcp_oracle.py write failed (rank 0's output)";
  test::expect_reshards_pytorch_dcp(pg, oracle);
}

// PyTorch's FSDP2 + Adam, 3 steps in, resumed by fully_shard: one more step lands on PyTorch's
// parameters after it.
TEST(MpiCheckpointPython, DpxResumesPyTorchsFsdp2Adam) {
  if (const auto& why = why_no_dcp(); !why.empty()) GTEST_SKIP() << why;
  auto pg = patient_group();
  const auto oracle = pytorch_checkpoints(pg);
  ASSERT_FALSE(oracle.empty()) << "tests/python/dcp_oracle.py write failed (rank 0's output)";
  test::expect_resumes_pytorch_fsdp2_adam(pg, oracle);
}

}  // namespace
}  // namespace dpx::mpi_test
