// Helpers of the tests that read and write checkpoint files: the Python oracle
// (tests/python/state_dict_oracle.py) of this build, temporary folders, raw files.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <torch/nn/modules/container/sequential.h>

#include "dpx/checkpoint/checkpoint_file.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"

namespace dpx::test {

// safetensors' oracle is the .venv Python whatever the build: the format does not depend on torch.
extern const std::string kVenvPython;

// Runs `python state_dict_oracle.py <args>` (args: words separated by single spaces; at most
// 120 s, through test::run_python); true when it exits 0.
bool run_oracle(const std::string& python, const std::string& args);
// The same with this build's Python (DPX_PYTHON).
inline bool oracle(const std::string& args) { return run_oracle(DPX_PYTHON, args); }

// The checkpoint tests' model (Linear, BatchNorm1d, Linear), the oracle's model(), and its
// state_dict keys in Python's order.
torch::nn::Sequential make_model();
extern const std::vector<std::string> kModelKeys;

// tests/python/dcp_oracle.py's model: Sequential(Linear(6, 7), Tanh(), Linear(7, 2), Linear(2, 5)
// in bfloat16), its parameters set to the oracle's values (arange * 0.37 - i, i-th parameter).
torch::nn::Sequential dcp_oracle_model();
// dcp_oracle.py's optim_model() (float32, trained by the Adam checkpoints) and the batch
// optim_step() trains it on, the loss its outputs' squares summed.
torch::nn::Sequential dcp_optim_model();
torch::Tensor dcp_optim_batch();

// A torch.save-shaped zip whose data.pkl is `pickle` (hand-written, e.g. calling os.system).
void write_zip_with_pickle(const std::string& path, const std::string& pickle);

}  // namespace dpx::test

#define SKIP_WITHOUT(python, module) DPX_SKIP_UNLESS_PYTHON_HAS(python, module)

#define EXPECT_CHECKPOINT_ERROR(stmt, text)                                     \
  try {                                                                         \
    stmt;                                                                       \
    ADD_FAILURE() << #stmt " did not throw";                                    \
  } catch (const dpx::CheckpointError& e) {                                     \
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what(); \
  }
