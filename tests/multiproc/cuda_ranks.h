// The set-up the CUDA tests of the multiproc tier share: ranks in processes of their own on a
// GPU, and copies of device tensors to compare on the CPU. The test process itself never
// touches CUDA (test::gpus_seen_by_a_child).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <optional>

#include "multiproc/ddp_models.h"
#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx::test {

// The test MLP with seed 7's initial weights, on `device`: the same model for every call.
inline Mlp mlp_on(at::Device device) {
  torch::manual_seed(7);
  Mlp net;
  net->to(device);
  return net;
}

// Two ranks sharing cuda:0 (the staged shm backend), each in a process of its own.
template <typename Body>
void on_two_gpu_ranks(Body body) {
  StoreServer server;
  expect_all_ok(run_processes(2, [&](int rank) {
    const at::Device device("cuda:0");
    ProcessGroup::Options o;
    o.device = device;
    body(rank, new_process_group("auto", server.client(), rank, 2, o), device);
  }));
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
