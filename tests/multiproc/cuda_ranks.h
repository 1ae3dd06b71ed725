// The set-up the CUDA tests of the multiproc tier share: ranks in processes of their own on a
// GPU, and copies of device tensors to compare on the CPU. The test process itself never
// touches CUDA (test::gpus_seen_by_a_child).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "multiproc/ddp_models.h"
#include "dpx/dpx.h"
#include "support/harness.h"
#include "support/nccl_ranks.h"

namespace dpx::test {

// The test MLP with seed 7's initial weights, on `device`: the same model for every call.
inline Mlp mlp_on(at::Device device) {
  torch::manual_seed(7);
  Mlp net;
  net->to(device);
  return net;
}

// The two ways ranks share this machine's one GPU, as the parameter of the tests that run both:
// "shm-staged" (auto's choice: shm, staged through host memory) and "nccl" (each rank a host of
// its own to NCCL: Note [NCCL ranks sharing a GPU]).
inline std::vector<std::string> gpu_sharing_backends() { return {"shm-staged", "nccl"}; }

inline std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "shm-staged" ? "staged" : info.param;
}

// The suites whose tests run once per gpu_sharing_backends() entry: skipped without a GPU, and
// on nccl without dpx's CUDA support.
class GpuRanksTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (gpus_seen_by_a_child() == 0) GTEST_SKIP() << "no CUDA device";
    if (GetParam() == "nccl" && !cuda::built()) GTEST_SKIP() << "dpx built without CUDA";
  }
};

// `world` ranks on cuda:0 over `backend` (gpu_sharing_backends), each in a process of its own;
// with nccl, on a GPU each where there are enough. Returns the ranks' results, checked unless
// `check_all_ok` is false (a test that kills a rank judges them itself). Ranks still running
// `grace` after the group's timeout are killed and reported as timed out.
template <typename Body>
std::vector<ProcResult> on_gpu_ranks(const std::string& backend, int world, Body body,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(60),
                                     bool check_all_ok = true,
                                     std::chrono::milliseconds grace = std::chrono::seconds(60)) {
  StoreServer server;
  const int gpus = backend == "nccl" ? gpus_seen_by_a_child() : 1;
  ProcOptions procs;
  procs.timeout = timeout + grace;
  auto results = run_processes(world, [&](int rank) {
    const at::Device device =
        backend == "nccl" ? nccl_rank_device(rank, world, gpus) : at::Device("cuda:0");
    ProcessGroup::Options o = with_timeout(timeout);
    o.device = device;
    auto pg = new_process_group(backend == "nccl" ? "nccl" : "auto", server.client(), rank, world,
                                o);
    ASSERT_EQ(pg->backend(), backend);
    body(rank, std::move(pg), device);
  }, procs);
  if (check_all_ok) expect_all_ok(results);
  return results;
}

// Two ranks sharing cuda:0 (the staged shm backend), each in a process of its own.
template <typename Body>
void on_two_gpu_ranks(Body body) {
  on_gpu_ranks("shm-staged", 2, std::move(body));
}

// Two ranks on cuda:0 and cuda:1 (auto: nccl), each in a process of its own; `stall_threshold`
// is the group's (unset: the default).
template <typename Body>
void on_two_gpus(Body body,
                 std::optional<std::chrono::milliseconds> stall_threshold = std::nullopt) {
  StoreServer server;
  expect_all_ok(run_processes(2, [&](int rank) {
    const at::Device device(at::kCUDA, static_cast<at::DeviceIndex>(rank));
    ProcessGroup::Options o;
    o.device = device;
    o.stall_threshold = stall_threshold;
    body(rank, new_process_group("auto", server.client(), rank, 2, o), device);
  }));
}

inline std::vector<torch::Tensor> on_cpu(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().cpu());
  return out;
}

}  // namespace dpx::test
