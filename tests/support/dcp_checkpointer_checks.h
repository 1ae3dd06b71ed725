// The DcpCheckpointer's background saves and pruning, shared by processes over shm
// (tests/multiproc/dcp_checkpointer_test.cpp) and under mpirun (tests/mpi/mpi_dcp_test.cpp). Each
// is the rank's part at any world size; `dir` is one folder that every rank sees.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dpx/comm/process_group.h"

namespace dpx::test {

// After 3 steps, a background save of kDcpProgress to `dir` whose writer waits after its first
// bytes until 2 more steps have changed the parameters and Adam's state in place; the checkpoint
// is listed once waited for. Rank 0 keeps the state at step 3 whole in <dir>/at_step_3.pt and
// optim_at_step_3.pt.
void async_save_while_training(const std::shared_ptr<ProcessGroup>& pg, bool sharded,
                               const std::string& dir);
// What dcp.save writes for `world` ranks: .metadata and one __<rank>_0.distcp each, sorted.
std::vector<std::string> dcp_step_files(int world);
// load_latest of that checkpoint restores the progress, and the model and Adam's state of step 3.
void expect_async_saved_state_resumes(const std::shared_ptr<ProcessGroup>& pg, bool sharded,
                                      const std::string& dir);

// A background save whose write throws on rank 1 is no checkpoint: wait() throws a
// CheckpointError on every rank naming ranks 0 and 1 (rank 1 its error, rank 0 that rank 1 could
// not write), the previous checkpoint stays the newest, and the next save succeeds.
void expect_failed_async_save_reported(const std::shared_ptr<ProcessGroup>& pg,
                                       const std::string& dir);

// keep_last 2 of steps 1, 2, 3: 3 and 2 stay. A step folder without .metadata (a save in
// progress, or cut short) is no checkpoint: not listed, not loaded.
void expect_keep_last_and_only_complete(const std::shared_ptr<ProcessGroup>& pg,
                                        const std::string& dir);

}  // namespace dpx::test
