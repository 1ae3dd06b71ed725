// A rank killed while the others all-gather parameters or reduce-scatter gradients: they get the
// typed error DDP gives them (DistributedError; the backend's PeerLostError), within the group's
// timeout, never a hang. And a backend without the collectives fully_shard needs is refused when
// the module is wrapped.
#include <signal.h>
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "dpx/fsdp/fully_shard.h"
#include "support/expect_throws.h"
#include "support/fsdp_models.h"
#include "support/harness.h"

namespace dpx {
namespace {

using std::chrono::milliseconds;

void step(FSDPModule<test::ShardNetImpl>& model, int rank) {
  auto x = torch::randn({3, 6}, torch::kFloat) + rank;
  model(x).square().mean().backward();
}

enum class Death { kBeforeForward, kAsBackwardStarts };

// rank 1 dies when `death` says; rank 0's step must end in a DistributedError within 6 s.
void expect_typed_error_when_a_rank_dies(bool reshard_after_forward, Death death) {
  for (const auto& backend : test::backends()) {
    SCOPED_TRACE("backend " + backend);
    test::StoreServer server;
    auto results = test::run_processes(2, [&](int rank) {
      auto pg = new_process_group(backend, server.client(), rank, 2,
                                  test::with_timeout(milliseconds(3000)));
      auto net = test::make_shard_net(false, torch::kFloat);
      FullyShardOptions options;
      options.reshard_after_forward = reshard_after_forward;
      auto model = test::shard(net, pg, options);
      step(model, rank);  // both ranks are connected and working
      const auto start = std::chrono::steady_clock::now();
      auto msg = test::expect_throws<DistributedError>([&] {
        if (rank == 1 && death == Death::kBeforeForward) test::kill_this_rank();
        auto loss = model(torch::randn({3, 6}, torch::kFloat)).square().mean();
        if (rank == 1) loss.register_hook([](const torch::Tensor&) { test::kill_this_rank(); });
        loss.backward();
      });
      std::cout << "rank " << rank << ": " << msg << "\n";
      EXPECT_NE(msg.find("[rank 0/2 "), std::string::npos) << msg;
      EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(6000));
    }, {std::chrono::seconds(60)});
    EXPECT_EQ(results[1].signal, SIGKILL) << results[1].output;
    EXPECT_TRUE(results[0].ok()) << results[0].output;
  }
}

// Note [Units across fork] in src/fsdp/registry.cpp: ranks forked after this process trained
// with fully_shard (threads as ranks; the model gone, its units not yet pruned) shard and train
// their own models; letting the parent's units go in the child must not join the parent's
// threads (it hung there, in the hierarchical group's destructor).
TEST(FsdpFaults, RanksForkedAfterAnEarlierModelDiedShardAndTrain) {
  for (const auto& backend : test::host_backends()) {
    SCOPED_TRACE("backend " + backend);
    auto store = Store::hash();
    auto errors = test::run_threads(2, [&](int rank) {
      auto pg = new_process_group(backend, store, rank, 2);
      auto net = test::make_shard_net(false, torch::kFloat);
      auto model = test::shard(net, pg);
      step(model, rank);
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
    test::StoreServer server;
    auto results = test::run_processes(2, [&](int rank) {
      auto pg = new_process_group(backend, server.client(), rank, 2);
      auto net = test::make_shard_net(false, torch::kFloat);
      auto model = test::shard(net, pg);
      step(model, rank);
    }, {std::chrono::seconds(60)});
    test::expect_all_ok(results);
  }
}

// rank 1 dies before its forward's all-gathers; rank 0 waits in the root's all-gather.
TEST(FsdpFaults, RankKilledMidAllGatherIsATypedError) {
  expect_typed_error_when_a_rank_dies(true, Death::kBeforeForward);
}

// rank 1 dies as its backward starts. Units keep their parameters after forward, so backward
// has no all-gather: rank 0's first collective is the last unit's reduce-scatter.
TEST(FsdpFaults, RankKilledMidReduceScatterIsATypedError) {
  expect_typed_error_when_a_rank_dies(false, Death::kAsBackwardStarts);
}

// A process group whose backend lacks reduce-scatter, as a third-party backend may.
class NoReduceScatterGroup : public ProcessGroup {
 public:
  explicit NoReduceScatterGroup(std::shared_ptr<ProcessGroup> inner)
      : ProcessGroup(inner->rank(), inner->size(), inner->options()), inner_(std::move(inner)) {}
  std::string backend() const override { return "partial"; }

 protected:
  std::shared_ptr<Work> do_allreduce(at::Tensor& t, const AllreduceOptions& o) override {
    return inner_->allreduce(t, o);
  }
  std::shared_ptr<Work> do_broadcast(at::Tensor& t, const BroadcastOptions& o) override {
    return inner_->broadcast(t, o);
  }
  std::shared_ptr<Work> do_allgather(at::Tensor& out, const at::Tensor& in) override {
    return inner_->allgather(out, in);
  }
  std::shared_ptr<Work> do_reduce_scatter(at::Tensor&, const at::Tensor&,
                                          const ReduceScatterOptions&) override {
    TORCH_CHECK(false, "backend partial does not support reduce_scatter");
  }
  std::shared_ptr<Work> do_barrier() override { return inner_->barrier(); }

 private:
  std::shared_ptr<ProcessGroup> inner_;
};

TEST(FsdpFaults, BackendWithoutReduceScatterIsRefusedAtWrapTime) {
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(2, [&](int rank) {
    auto pg = std::make_shared<NoReduceScatterGroup>(
        new_process_group("gloo", server.client(), rank, 2, test::with_timeout(milliseconds(5000))));
    auto net = test::make_shard_net(false, torch::kFloat);
    const auto weight = net->blocks[0]->fc->weight;
    auto msg = test::expect_throws<c10::Error>([&] { fully_shard(net->blocks[0], pg); });
    EXPECT_NE(msg.find("fully_shard needs all-gather and reduce-scatter"), std::string::npos) << msg;
    EXPECT_NE(msg.find("backend partial does not support reduce_scatter"), std::string::npos) << msg;
    EXPECT_EQ(weight.sizes(), (std::vector<int64_t>{13, 8})) << "nothing was sharded";
  }, {std::chrono::seconds(60)}));
}

}  // namespace
}  // namespace dpx
