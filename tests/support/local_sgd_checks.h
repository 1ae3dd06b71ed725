// PeriodicModelAverager's schedule and arithmetic over a real group, shared by threads as ranks
// (tests/multirank/local_sgd_test.cpp) and processes under mpirun (tests/mpi/mpi_local_sgd_test.cpp).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>

#include "dpx/algorithms/local_sgd.h"
#include "dpx/comm/process_group.h"

namespace dpx::test {

// The rank's part. Period 3 after a warm-up of 1: calls 1 and 4 average (of 0..5); the others
// leave each rank's parameters as they are. Parameters without a gradient are never averaged.
// Every value is a multiple of the world size, so the average (each rank's share divided first,
// as PyTorch does) is exact in any order.
inline void expect_periodic_averaging(const std::shared_ptr<ProcessGroup>& pg) {
  const int rank = pg->rank(), world = pg->size();
  auto p = torch::full({3}, 0.0).requires_grad_(true);
  auto q = torch::full({2}, static_cast<double>(world * rank), torch::kDouble).requires_grad_(true);
  auto frozen = torch::full({2}, static_cast<double>(rank));
  p.mutable_grad() = torch::zeros_like(p);
  q.mutable_grad() = torch::zeros_like(q);
  PeriodicModelAverager averager(3, pg, 1);
  for (int call = 0; call < 6; ++call) {
    {
      torch::NoGradGuard no_grad;
      p.fill_(call * world * (rank + 1));
    }
    averager.average_parameters({p, q, frozen});
    const bool averaged = call == 1 || call == 4;
    const double want = averaged ? call * world * (world + 1) / 2.0 : call * world * (rank + 1);
    EXPECT_TRUE(torch::equal(p, torch::full({3}, want, torch::kFloat)))
        << "call " << call << ": " << p;
    EXPECT_EQ(averager.step(), call + 1);
  }
  EXPECT_TRUE(torch::equal(q, torch::full({2}, world * (world - 1) / 2.0, torch::kDouble))) << q;
  EXPECT_TRUE(torch::equal(frozen, torch::full({2}, static_cast<double>(rank))));
}

}  // namespace dpx::test
