// fully_shard against PyTorch's own fully_shard (FSDP2) on CPU over gloo
// (tests/python/fsdp_reference.py), shared by threads as ranks
// (tests/multiproc/fsdp_python_test.cpp) and processes under mpirun (tests/mpi/mpi_fsdp_python_test.cpp): the same initial model, data
// and optimizer; after 20 steps every parameter and buffer of the full state dict, and the full
// optimizer state dict (get_optimizer_state_dict(full_state_dict=True)), agree to 1e-12 in
// float64, and within a stated tolerance in float32 and under mixed precision (where the sums'
// order differs). PyTorch runs one process per rank.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

#include "dpx/comm/process_group.h"
#include "dpx/fsdp/fully_shard.h"

namespace dpx::test {

constexpr int kFsdpPythonSteps = 20;
constexpr int64_t kFsdpPythonPerRank = 3;  // samples per rank and step

struct FsdpPythonCase {
  int world;
  std::string optimizer;  // "sgd" or "adamw": test::sgd, test::adamw (fsdp_reference.py's)
  bool tied;  // ShardNet's
  torch::Dtype dtype = torch::kDouble;  // the parameters'
  MixedPrecisionPolicy policy;
  double atol = 1e-12;
  std::string model = "";  // "": ShardNet; "seq": sequential(); "list": ListNet
};

struct FsdpPythonData {
  torch::Tensor x, y;  // [steps, world x kFsdpPythonPerRank, features]
};

struct PyTorchFsdpResult {
  std::map<std::string, torch::Tensor> model;  // the full state dict, by name
  c10::IValue optimizer;  // get_optimizer_state_dict(full_state_dict=True)
};

// The case of the running test, by its name (FsdpPython.* and MpiFsdpPython.* share names).
FsdpPythonCase fsdp_python_case();
// Why the case cannot be compared on this machine, or "" (and `python`, the one to run).
std::string fsdp_python_skip(const FsdpPythonCase& c, std::string* python);
FsdpPythonData fsdp_python_data(const FsdpPythonCase& c);
// Writes init.pt and data.pt into `dir`, runs PyTorch's ranks, returns rank 0's final state
// (empty, with a test failure, when the run failed).
PyTorchFsdpResult run_pytorch_fully_shard(const std::string& python, const FsdpPythonCase& c,
                                          const std::string& dir, const FsdpPythonData& d);
// The final state a run left in `dir`.
PyTorchFsdpResult load_pytorch_fully_shard(const std::string& dir);
// Rank pg->rank()'s part: trains its slice of every step under fully_shard, gathers the full
// state and optimizer state, loads PyTorch's optimizer state and gathers it again; rank 0
// expects them to match `want`.
void train_and_compare_with_pytorch(const FsdpPythonCase& c,
                                    const std::shared_ptr<ProcessGroup>& pg,
                                    const FsdpPythonData& d, const PyTorchFsdpResult& want);

}  // namespace dpx::test
