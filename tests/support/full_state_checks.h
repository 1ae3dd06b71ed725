// fully_shard's full state dict in a file, shared by processes over gloo
// (tests/multiproc/fsdp_checkpoint_test.cpp) and under mpirun (tests/mpi/mpi_checkpoint_test.cpp):
// written by save_full_state_dict, it is what an unsharded module of the class, a freshly
// sharded one and PyTorch's torch.load read.
#pragma once

#include <memory>
#include <string>

#include "dpx/comm/process_group.h"

namespace dpx::test {

// The rank's part, at any world size dividing 6: the tied ShardNet, sharded, takes 2 SGD steps
// on its rows of a batch of 6 and is saved whole to `path`; rank 0 loads the file into an
// unsharded ShardNet and every rank into a freshly sharded one, both expected to hold the
// trained values.
void save_and_reload_full_state_dict(const std::shared_ptr<ProcessGroup>& pg,
                                     const std::string& path);

// PyTorch (this build's Python) reads the file saved above with torch.load(weights_only=True)
// under the names and shapes of the tied ShardNet; its output is kept in <dir>/python.txt.
void expect_python_reads_full_state_dict(const std::string& path, const std::string& dir);

}  // namespace dpx::test
