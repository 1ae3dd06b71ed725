// DCP checkpoints between dpx and PyTorch 2.15 (tests/python/dcp_oracle.py), shared by processes
// over shm (tests/multiproc/dcp_save_test.cpp, dcp_checkpointer_test.cpp) and under mpirun
// (tests/mpi/mpi_dcp_python_test.cpp): dpx's checkpoints that PyTorch's dcp.load reads, and
// PyTorch's FSDP2 checkpoints that dpx's fully_shard reshards and resumes.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "dpx/comm/process_group.h"

namespace dpx::test {

// The oracle's Adam (away from Adam's defaults), and `steps` of it on dcp_optim_batch().
torch::optim::AdamOptions dcp_oracle_adam();
void dcp_adam_steps(torch::nn::Sequential& m, torch::optim::Optimizer& opt, int steps);

// The rank's part of a world of N = pg->size() saving the oracle model to dir/sharded-N
// (fully_shard) and dir/replicated-N (the whole module on every rank, as under DDP); the
// optimizer's model, fully_shard and 3 steps of Adam in, with its Adam to dir/adam-N, its state
// whole to dir/adam-N-optim.pt for PyTorch to compare with; and the optimizer's model whole on
// every rank, 3 steps of a ZeroRedundancyOptimizer over Adam in (each rank the state of its
// share), to dir/zero-N, with a plain Adam's state after the same steps in dir/zero-N-optim.pt.
void dcp_save_for_pytorch(const std::shared_ptr<ProcessGroup>& pg, const std::string& dir);

// What dcp_oracle.py check reads in `dir`: expected.pt, and the lists of what the saves above
// wrote for `worlds` (checkpoints.txt, optim_checkpoints.txt), with DcpCheckpointer step folders
// of support/dcp_resume.h's dcp_train_and_save (`training`, relative to `dir`: their model and
// Adam, and on one rank their model and kDcpProgress). Returns the model checkpoints' names; the
// optimizers' are dcp_optimizer_checkpoints(worlds).
std::vector<std::string> write_dcp_check_lists(const std::string& dir,
                                               const std::vector<int>& worlds,
                                               const std::vector<std::string>& training = {});
std::vector<std::string> dcp_optimizer_checkpoints(const std::vector<int>& worlds);
// dcp_oracle.py check `dir` on `world` ranks; false (its output above) when a tensor differed.
bool pytorch_checks_dcp(const std::string& dir, int world);

// dpx reads its own checkpoints whole, in one process: the models named and the optimizers'
// states named (against their -optim.pt), hyper-parameters included.
void expect_dpx_reads_dcp_models_whole(const std::string& dir,
                                       const std::vector<std::string>& names);
void expect_dpx_reads_dcp_optimizers_whole(const std::string& dir,
                                           const std::vector<std::string>& names);

// The folder of PyTorch's checkpoints (dcp_oracle.py write, run once per build); "" if it failed.
std::string pytorch_dcp_checkpoints();
// The rank's part, at any world size: PyTorch's FSDP2 checkpoint of 3 ranks (`oracle`/three)
// resharded into dpx's fully_shard; gathered whole, the values are PyTorch's.
void expect_reshards_pytorch_dcp(const std::shared_ptr<ProcessGroup>& pg,
                                 const std::string& oracle);
// The rank's part: PyTorch's FSDP2 + Adam of 3 ranks, 3 steps in (`oracle`/adam), resumed by
// dpx's fully_shard; one more step lands on PyTorch's parameters after it (adam_next.pt).
void expect_resumes_pytorch_fsdp2_adam(const std::shared_ptr<ProcessGroup>& pg,
                                       const std::string& oracle);

}  // namespace dpx::test
