// PyTorch's _test_ddp_hook_parity (distributed_test.py), shared by the conformance suite
// (tests/conformance/ddp_logging_hooks_test.cpp) and the mpi tests under mpirun
// (tests/mpi/mpi_hooks_test.cpp): Linear(1, 5) fed [rank]; the weight's gradient is the mean of
// the ranks, (world - 1) / 2, exactly, with and without the hook, for 100 iterations.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>

#include "dpx/comm/process_group.h"
#include "dpx/ddp/distributed_data_parallel.h"

namespace dpx::test {

// Iterations from `validated` on still run (the hook's later phase) but are not checked.
inline void hook_parity(const std::shared_ptr<ProcessGroup>& pg, at::Device device,
                        const std::function<void(DdpBase&)>& register_hook,
                        int validated = 100) {
  torch::manual_seed(0);
  torch::nn::Linear with(1, 5), without(1, 5);
  {
    torch::NoGradGuard no_grad;
    without->weight.copy_(with->weight);
    without->bias.copy_(with->bias);
  }
  with->to(device);
  without->to(device);
  DistributedDataParallel ddp_hook(with, pg), ddp_plain(without, pg);
  register_hook(*ddp_hook);
  const double expected = (pg->size() - 1) / 2.0;
  for (int i = 0; i < 100; ++i) {
    for (auto* m : {&with, &without}) {
      auto& g = (*m)->weight.mutable_grad();
      if (g.defined()) g.zero_();
    }
    const auto batch = torch::tensor({static_cast<float>(pg->rank())}).to(device);
    ddp_plain(batch).sum().backward();
    ddp_hook(batch).sum().backward();
    if (i >= validated) continue;
    const auto hooked = with->weight.grad()[0][0].item<double>();
    EXPECT_EQ(hooked, expected) << "iteration " << i;
    EXPECT_EQ(hooked, without->weight.grad()[0][0].item<double>()) << "iteration " << i;
  }
}

}  // namespace dpx::test
