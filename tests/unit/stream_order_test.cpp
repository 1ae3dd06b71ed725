// Which collectives' results the host waits for, on any machine. On a device group a payload
// collective is stream-ordered (Work::synchronize: the host goes on, what it queues next sees
// the result), as PyTorch's broadcast_coalesced and its sparse all-gathers are; only host
// values (DDP's control tensors) are worth a host wait (Work::wait). A group of two ranks in
// one records which of the two each caller used.
#include <torch/torch.h>

#include "dpx/dpx.h"

namespace dpx {
namespace {

struct Call {
  std::string op;
  at::ScalarType dtype;
  bool waited = false;        // Work::wait: the host waited
  bool synchronized = false;  // Work::synchronize: stream-ordered
};

class RecordingWork : public Work {
 public:
  explicit RecordingWork(std::shared_ptr<Call> call)
      : Work(std::chrono::milliseconds(1000)), call_(std::move(call)) {}
  void wait(std::chrono::milliseconds) override { call_->waited = true; }
  using Work::wait;
  void synchronize() override { call_->synchronized = true; }
  bool is_completed() override { return true; }
  std::exception_ptr exception() override { return nullptr; }

 private:
  std::shared_ptr<Call> call_;
};

// Rank 0 of two whose peer holds what it holds: each result is known at once (a sum doubles,
// an all-gather repeats, root's broadcast is this rank's own tensor).
class MirrorGroup : public ProcessGroup {
 public:
  MirrorGroup() : ProcessGroup(0, 2, {}) {}
  std::string backend() const override { return "mirror"; }
  std::vector<std::shared_ptr<Call>> calls;

 protected:
  std::shared_ptr<Work> do_allreduce(at::Tensor& t, const AllreduceOptions& opts) override {
    if (opts.op == ReduceOp::kSum) t.mul_(2);
    if (opts.op == ReduceOp::kProduct) t.mul_(t);
    return record("allreduce", t);
  }
  std::shared_ptr<Work> do_broadcast(at::Tensor& t, const BroadcastOptions&) override {
    return record("broadcast", t);
  }
  std::shared_ptr<Work> do_allgather(at::Tensor& out, const at::Tensor& in) override {
    out.view({2, -1}).copy_(in.reshape({1, -1}).expand({2, in.numel()}));
    return record("allgather", in);
  }
  std::shared_ptr<Work> do_reduce_scatter(at::Tensor& out, const at::Tensor& in,
                                          const ReduceScatterOptions&) override {
    out.copy_(in.view({2, -1})[0].view(out.sizes()) * 2);
    return record("reduce_scatter", in);
  }
  std::shared_ptr<Work> do_barrier() override { return record("barrier", at::zeros({})); }

 private:
  std::shared_ptr<Work> record(const char* op, const at::Tensor& t) {
    calls.push_back(std::make_shared<Call>(Call{op, t.scalar_type()}));
    return std::make_shared<RecordingWork>(calls.back());
  }
};

// The calls of `op` on tensors of `dtype`: each stream-ordered and never waited for.
void expect_stream_ordered(const MirrorGroup& pg, const std::string& op, at::ScalarType dtype,
                           size_t at_least) {
  size_t n = 0;
  for (const auto& c : pg.calls) {
    if (c->op != op || c->dtype != dtype) continue;
    ++n;
    EXPECT_TRUE(c->synchronized) << op << " #" << n << " was not ordered with the stream";
    EXPECT_FALSE(c->waited) << op << " #" << n << " made the host wait";
  }
  EXPECT_GE(n, at_least) << "too few " << op << "s of " << dtype;
}

struct WithBufferImpl : torch::nn::Module {
  WithBufferImpl() {
    fc = register_module("fc", torch::nn::Linear(4, 3));
    gain = register_buffer("gain", torch::full({3}, 2.0f));
  }
  torch::Tensor forward(torch::Tensor x) { return fc(x) * gain; }
  torch::nn::Linear fc{nullptr};
  torch::Tensor gain;
};
TORCH_MODULE(WithBuffer);

// The model broadcast when DDP is made, the buffers' at every synchronised forward, the
// buckets' all-reduce at the end of backward: none makes the host wait.
TEST(StreamOrder, DdpBroadcastsAndBucketsDoNotWaitOnTheHost) {
  auto pg = std::make_shared<MirrorGroup>();
  torch::manual_seed(0);
  WithBuffer net;
  DistributedDataParallel ddp(net, pg);
  expect_stream_ordered(*pg, "broadcast", at::kFloat, 1);
  pg->calls.clear();
  auto x = torch::randn({5, 4});
  ddp->forward(x).sum().backward();
  expect_stream_ordered(*pg, "broadcast", at::kFloat, 1);
  expect_stream_ordered(*pg, "allreduce", at::kFloat, 1);
  // The average over two equal ranks is this rank's gradient.
  auto expected = x.sum(0).unsqueeze(0).expand({3, 4}) * 2;
  EXPECT_TRUE(net->fc->weight.grad().allclose(expected));
}

// ZeRO's step broadcasts each rank's updated shard.
TEST(StreamOrder, ZeroStepBroadcastsDoNotWaitOnTheHost) {
  auto pg = std::make_shared<MirrorGroup>();
  torch::nn::Linear a(4, 3), b(3, 2);
  std::vector<torch::Tensor> params = a->parameters();
  for (const auto& p : b->parameters()) params.push_back(p);
  for (const auto& p : params) p.mutable_grad() = torch::ones_like(p);
  ZeroRedundancyOptimizer zero(params, pg, optimizer_factory<torch::optim::SGD>(
                                               torch::optim::SGDOptions(0.1)));
  zero.step();
  expect_stream_ordered(*pg, "broadcast", at::kFloat, 2);  // one per rank's shard
}

struct SparseImpl : torch::nn::Module {
  SparseImpl() {
    emb = register_module("emb",
                          torch::nn::Embedding(torch::nn::EmbeddingOptions(10, 3).sparse(true)));
  }
  torch::Tensor forward(torch::Tensor ids) { return emb(ids); }
  torch::nn::Embedding emb{nullptr};
};
TORCH_MODULE(Sparse);

// A sparse gradient's all-gathers (its nnz, then its indices and values; Note [Sparse buckets])
// are stream-ordered; reading the nnz on the host is the one wait it needs.
TEST(StreamOrder, SparseGathersDoNotWaitOnTheHost) {
  auto pg = std::make_shared<MirrorGroup>();
  torch::manual_seed(0);
  Sparse net;
  DistributedDataParallel ddp(net, pg);
  pg->calls.clear();
  auto ids = torch::tensor({1, 4, 4, 7}, torch::kLong);
  (ddp->forward(ids) * torch::arange(12, torch::kFloat).view({4, 3})).sum().backward();
  expect_stream_ordered(*pg, "allgather", at::kLong, 2);   // the nnz, the indices
  expect_stream_ordered(*pg, "allgather", at::kFloat, 1);  // the values
  auto grad = net->emb->weight.grad();
  ASSERT_TRUE(grad.is_sparse());
  auto dense = grad.to_dense();
  EXPECT_TRUE(dense[4].equal(torch::tensor({9.0f, 11.0f, 13.0f})));  // rows 1 and 2 of the weights
  EXPECT_TRUE(dense[7].equal(torch::tensor({9.0f, 10.0f, 11.0f})));
  EXPECT_TRUE(dense[0].equal(torch::zeros({3})));
}

}  // namespace
}  // namespace dpx
