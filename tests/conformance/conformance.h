// The conformance suite: PyTorch's own test cases (distributed_test.py, ProcessGroupGlooTest.cpp,
// the store tests), transcribed for dpx. Each test is named after the PyTorch test it follows
// and runs on every dpx backend where the case applies; docs/conformance.md lists them and says
// where dpx differs on purpose.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx::conformance {

// One rank of a case: its group and the device its tensors live on (the CPU; for nccl cuda:rank,
// or cuda:0 for every rank where there are fewer GPUs: Note [NCCL ranks sharing a GPU]).
struct Rank {
  int rank = 0;
  int world = 1;
  std::shared_ptr<ProcessGroup> pg;
  at::Device device = at::kCPU;
  std::shared_ptr<Store> store;  // on the group's store server: for the test's own keys
};

// The backends a case runs on, as the suite's parameter: gloo, shm, hierarchical, and nccl
// (skipped without a GPU); under an MPI launcher, mpi alone (Note [Conformance under mpirun]).
std::vector<std::string> backends();

struct RunOptions {
  std::chrono::milliseconds timeout = std::chrono::seconds(60);  // of every collective
  std::optional<std::chrono::milliseconds> stall_threshold;      // unset: the group's default
  bool expect_all_ok = true;  // false: the caller judges the results (a rank killed on purpose)
  bool any_world = false;     // the case holds at any world size: under mpirun, mpirun's
};

// A test of the suite on one backend. run() forks `world` ranks on a fresh store and runs
// body(rank) in each; it returns their results (none when the backend was skipped). On mpi it
// runs body once, as this process's MPI rank, and returns no results.
class OnBackend : public ::testing::TestWithParam<std::string> {
 protected:
  std::vector<test::ProcResult> run(int world, const std::function<void(Rank&)>& body,
                                    RunOptions options = {});
  // Why this backend cannot host `world` ranks here ("" when it can); run() skips then.
  std::string why_not(int world, const RunOptions& options = {}) const;
  const std::string& backend() const { return GetParam(); }
};

// Options of a case that holds at any world size (RunOptions::any_world).
inline RunOptions any_world() {
  RunOptions o;
  o.any_world = true;
  return o;
}

// Every rank's copy of `t` (same shape on every rank), gathered on the CPU.
std::vector<at::Tensor> gather(Rank& r, const at::Tensor& t);
// Every parameter of `module`, flattened into one float64 CPU tensor.
at::Tensor flat(torch::nn::Module& module);
// Asserts that `t` is bitwise the same on every rank.
void expect_same_on_every_rank(Rank& r, const at::Tensor& t, const std::string& what);

// The suites, named after PyTorch's files; each is instantiated once per backend
// (conformance.cpp): tests read Backends/DistributedTest.test_ddp_uneven_inputs/shm.
class DistributedTest : public OnBackend {};       // torch/testing/_internal/distributed/...
class ProcessGroupGlooTest : public OnBackend {};  // test/cpp/c10d/ProcessGroupGlooTest.cpp

}  // namespace dpx::conformance

