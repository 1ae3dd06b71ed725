// dpx DDP against PyTorch's Python DDP (support/ddp_python_run.h) where each rank's own run
// matters: join() with uneven inputs, the PowerSGD hook and post-local SGD. Each comparison has
// two halves: every rank trains with dpx over the process group it is given and writes its result
// into the oracle's folder; then one process reads every rank's file beside PyTorch's. Forked
// ranks (tests/multiproc/ddp_join_python_test.cpp, ddp_python_test.cpp) and processes under
// mpirun (tests/mpi/mpi_ddp_python_test.cpp) share them.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dpx/comm/process_group.h"
#include "multiproc/ddp_models.h"

namespace dpx::test::python {

// join(): 3 ranks, rank R training kJoinSteps[R] steps (rank 0 runs out first, rank 1 trains
// longest), the BatchNorm CNN, broadcast_buffers as given.
constexpr int kJoinWorld = 3;
std::string join_meta(bool broadcast_buffers);  // PythonRun's extra_meta
// pg->rank()'s steps inside join(), from `init` (read on rank 0 alone: DDP broadcasts it);
// writes dpx_state_rank<R>.json into `dir`.
void train_in_join(const std::shared_ptr<ProcessGroup>& pg, test::Cnn& init,
                   const std::vector<test::Batch>& data, bool broadcast_buffers,
                   const std::string& dir);
// Every rank's parameters, gradients and buffers (num_batches_tracked exactly) are PyTorch's.
void expect_join_matches_python(const std::string& dir, bool broadcast_buffers);

// powersgd_hook (rank 2, from iteration 2, error feedback and warm start) on kWorld ranks;
// rank 0 writes dpx_final.bin, compared by expect_same_params with python_final.bin.
extern const char kPowerSgdMeta[];
void train_with_powersgd(const std::shared_ptr<ProcessGroup>& pg, test::Cnn& init,
                         const std::vector<test::Batch>& data, const std::string& dir);

// post_local_sgd_hook (no gradient all-reduce from iteration 2), PostLocalSGDOptimizer and
// PeriodicModelAverager(period 2, warm-up 2) on kWorld ranks; each writes dpx_final_rank<R>.bin.
extern const char kPostLocalSgdMeta[];
void train_with_post_local_sgd(const std::shared_ptr<ProcessGroup>& pg, test::Cnn& init,
                               const std::vector<test::Batch>& data, const std::string& dir);
// Each rank's parameters are PyTorch's for that rank, and the ranks ended apart.
void expect_post_local_sgd_matches_python(const std::string& dir);

}  // namespace dpx::test::python
