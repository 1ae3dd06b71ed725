// fully_shard's ShardedCheckpointer saved at one world size and resumed at another, shared by
// processes over shm (tests/multiproc/fsdp_checkpoint_test.cpp) and under mpirun, where each
// world size is a run of its own (tests/mpi/mpi_resume_test.cpp, tests/scripts/mpi/resume.sh).
// ShardNet trains with Adam on each rank's rows of a global batch of 6 (any world size that
// divides it).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpx/comm/process_group.h"
#include "support/fsdp_models.h"

namespace dpx::test {

constexpr int64_t kShardedBatch = 6;
torch::Tensor sharded_batch_x(int step);
torch::Tensor sharded_batch_y(int step);

// Steps [from, to) of Adam on this rank's rows of the global batches.
void train_sharded_steps(FSDPModule<ShardNetImpl>& model, torch::optim::Optimizer& opt, int from,
                         int to, int rank, int world);

// A state's values flattened to float64 in a raw file, and read back.
void write_params(const std::string& path,
                  const std::vector<std::pair<std::string, torch::Tensor>>& state);
torch::Tensor read_params(const std::string& path);

// The rank's part: resumes from `dir`'s newest checkpoint when `resume` (which must be at step
// `save_at`), else starts afresh and saves a sharded checkpoint after step `save_at`; runs to
// `steps`; rank 0 writes the final full state dict's values to `out`.
void sharded_checkpoint_run(const std::shared_ptr<ProcessGroup>& pg, const std::string& dir,
                            bool resume, int save_at, int steps, const std::string& out);
// The same resume with the model's state only (the optimizer's loaded into a scratch Adam and
// dropped): Adam starts afresh at `save_at`, so `out` should differ from the uninterrupted run's.
void sharded_resume_without_optimizer_state(const std::shared_ptr<ProcessGroup>& pg,
                                            const std::string& dir, int steps,
                                            const std::string& out);

}  // namespace dpx::test
