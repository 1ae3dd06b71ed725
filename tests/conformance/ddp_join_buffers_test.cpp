// Buffers under join() (Note [Buffers under join] in src/ddp/ddp_base.cpp): PyTorch takes them
// from the highest rank that still has data at every synchronised forward, and at the end sends
// them with the parameters only when broadcast_buffers is on. Checked here with a buffer that
// names the rank and step it came from; against PyTorch's own DDP with a BatchNorm model in
// tests/multiproc/ddp_join_python_test.cpp.
#include "conformance/conformance.h"

namespace dpx::conformance {
namespace {

const std::vector<int> kJoinSteps = {2, 5, 4};  // per rank: rank 0 runs out first, rank 1 last

// Records the buffer it finds at each forward, then writes 100 * rank + step into it: what a
// broadcast hands over names the rank and the step it came from.
struct RecorderImpl : torch::nn::Module {
  explicit RecorderImpl(int rank) : rank(rank) {
    lin = register_module("lin", torch::nn::Linear(2, 2));
    b = register_buffer("b", torch::zeros({1}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    seen.push_back(b.item<double>());
    b.fill_(100 * rank + step++);
    return lin(x);
  }
  int rank, step = 0;
  std::vector<double> seen;
  torch::nn::Linear lin{nullptr};
  torch::Tensor b;
};
TORCH_MODULE(Recorder);

// The highest rank that has a step `s`.
int authority(int s) {
  int a = -1;
  for (int r = 0; r < static_cast<int>(kJoinSteps.size()); ++r) {
    if (kJoinSteps[r] > s) a = r;
  }
  return a;
}

// The rank that trains longest (the highest of them on a tie): its model is the one kept.
int last_joiner() {
  int last = 0;
  for (int r = 0; r < static_cast<int>(kJoinSteps.size()); ++r) {
    if (kJoinSteps[r] >= kJoinSteps[last]) last = r;
  }
  return last;
}

void buffers_under_join(Rank& r, bool broadcast_buffers) {
  Recorder net(r.rank);
  net->to(r.device);
  DistributedDataParallelOptions o;
  o.broadcast_buffers = broadcast_buffers;
  DistributedDataParallel ddp(net, r.pg, o);
  const auto x = torch::ones({1, 2}, r.device);
  ddp->join([&] {
    for (int s = 0; s < kJoinSteps[r.rank]; ++s) ddp(x).sum().backward();
  });
  for (int s = 1; s < kJoinSteps[r.rank]; ++s) {
    const int from = broadcast_buffers ? authority(s) : r.rank;
    EXPECT_EQ(net->seen[s], 100 * from + s - 1) << "step " << s;
  }
  const int last = broadcast_buffers ? last_joiner() : r.rank;
  EXPECT_EQ(net->b.item<double>(), 100 * last + kJoinSteps[last] - 1);
}

TEST_P(DistributedTest, test_ddp_uneven_inputs_buffers_from_the_highest_rank_with_data) {
  run(3, [](Rank& r) { buffers_under_join(r, /*broadcast_buffers=*/true); });
}

TEST_P(DistributedTest, test_ddp_uneven_inputs_no_broadcast_buffers_keeps_each_ranks_own) {
  run(3, [](Rank& r) { buffers_under_join(r, /*broadcast_buffers=*/false); });
}

}  // namespace
}  // namespace dpx::conformance
