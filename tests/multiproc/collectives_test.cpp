// Every op x dtype x world size 1..4 on every backend, with real processes and exact values.
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx {
namespace {

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kBFloat16,
                                             at::kHalf,  at::kInt,    at::kLong};
constexpr int64_t kNumel = 37;  // odd, so chunking code meets a remainder

// Rank r contributes base_r * (1 + i % 3) at index i: small integers, exact in every dtype.
at::Tensor contribution(int rank, int world, at::ScalarType dt, int64_t numel = kNumel) {
  auto pattern = at::arange(numel, at::kLong).remainder(3).add(1);
  return pattern.mul(rank + 1).to(dt);
}

at::Tensor expected_reduce(ReduceOp op, int world, at::ScalarType dt, int64_t numel = kNumel) {
  auto pattern = at::arange(numel, at::kLong).remainder(3).add(1);
  int64_t sum = world * (world + 1) / 2, prod = 1;
  for (int r = 1; r <= world; ++r) prod *= r;
  switch (op) {
    case ReduceOp::kSum: return pattern.mul(sum).to(dt);
    case ReduceOp::kMin: return pattern.to(dt);
    case ReduceOp::kMax: return pattern.mul(world).to(dt);
    case ReduceOp::kProduct: return pattern.pow(world).mul(prod).to(dt);
    case ReduceOp::kAvg: return pattern.mul(sum).to(dt);  // inputs are scaled by world below
  }
  return {};
}

void check_all_collectives(ProcessGroup& pg) {
  const int r = pg.rank(), w = pg.size();
  for (auto dt : kDtypes) {
    SCOPED_TRACE(std::string("dtype ") + c10::toString(dt));
    for (auto op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct,
                    ReduceOp::kAvg}) {
      if (op == ReduceOp::kAvg && !at::isFloatingType(dt)) continue;
      SCOPED_TRACE(std::string("op ") + to_string(op));
      auto t = contribution(r, w, dt);
      if (op == ReduceOp::kAvg) t = t.mul(w);  // keeps the average an exact integer
      pg.allreduce(t, {op})->wait();
      EXPECT_TRUE(t.equal(expected_reduce(op, w, dt)));

      auto in = at::cat(std::vector<at::Tensor>(w, contribution(r, w, dt)));
      if (op == ReduceOp::kAvg) in = in.mul(w);
      auto out = at::empty({kNumel}, dt);
      pg.reduce_scatter(out, in, {op})->wait();
      EXPECT_TRUE(out.equal(expected_reduce(op, w, dt)));
    }
    for (int root = 0; root < w; ++root) {
      auto t = r == root ? contribution(root, w, dt) : at::zeros({kNumel}, dt);
      pg.broadcast(t, {root})->wait();
      EXPECT_TRUE(t.equal(contribution(root, w, dt))) << "root " << root;
    }
    auto gathered = at::empty({w * kNumel}, dt);
    pg.allgather(gathered, contribution(r, w, dt))->wait();
    for (int q = 0; q < w; ++q) {
      EXPECT_TRUE(gathered.narrow(0, q * kNumel, kNumel).equal(contribution(q, w, dt)))
          << "slice of rank " << q;
    }
  }
  pg.barrier()->wait();
}

class Collectives : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(Collectives, EveryOpAndDtypeExact) {
  const auto [backend, world] = GetParam();
  test::StoreServer server;
  auto results = test::run_processes(world, [&](int rank) {
    auto pg = new_process_group(backend, server.client(), rank, world);
    check_all_collectives(*pg);
  });
  test::expect_all_ok(results);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, Collectives,
                         ::testing::Combine(::testing::ValuesIn(test::host_backends()),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_world" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace dpx
