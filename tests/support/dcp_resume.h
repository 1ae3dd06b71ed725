// A DcpCheckpointer saved at one world size and resumed at another, shared by processes over shm
// (tests/multiproc/dcp_checkpointer_test.cpp) and under mpirun, where each world size is a run of
// its own (tests/mpi/mpi_resume_test.cpp, tests/scripts/mpi/resume.sh). The model is
// dcp_oracle.py's optim_model(), sharded by fully_shard or whole on every rank (as under DDP).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include "dpx/checkpoint/training_checkpointer.h"
#include "dpx/comm/process_group.h"

namespace dpx::test {

inline const TrainingProgress kDcpProgress{.epoch = 1, .step = 3, .sampler_position = 5};

// dcp_oracle.py's optim_model() on this rank: sharded by fully_shard over `pg`, or whole.
struct DcpReplica {
  torch::nn::Sequential net;
  std::function<torch::Tensor(const torch::Tensor&)> forward;

  DcpReplica(bool sharded, const std::shared_ptr<ProcessGroup>& pg);
  // Steps of Adam on the same batch on every rank: the same values on any world size.
  void train(torch::optim::Optimizer& opt, int steps);
  c10::impl::GenericDict whole_state(bool sharded) const;
};

torch::optim::Adam dcp_adam(const DcpReplica& r);  // away from Adam's defaults

// Every tensor of `got` (a state dict, or an optimizer's {'state': {name: {key: tensor}}}) equal
// to `want`'s.
void expect_same_dict(const c10::impl::GenericDict& got, const c10::impl::GenericDict& want,
                      const std::string& what);

// The saving rank's part: 3 steps, then kDcpProgress saved to `dir`; rank 0 keeps the model and
// the optimizer's state whole in <dir>/dcp-3-model.pt and -optim.pt.
void dcp_train_and_save(const std::shared_ptr<ProcessGroup>& pg, bool sharded,
                        const std::string& dir);
// The resuming rank's part, at any world size: load_latest restores the progress, the model and
// Adam's state and hyper-parameters that dcp_train_and_save saved.
void expect_dcp_resumes(const std::shared_ptr<ProcessGroup>& pg, bool sharded,
                        const std::string& dir);

}  // namespace dpx::test
