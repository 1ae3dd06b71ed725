// The hierarchical backend (Note [Hierarchical collectives] in
// src/comm/backends/hierarchical/process_group_hierarchical.cpp) on two network-namespace hosts:
// exact against flat gloo for every op, chosen by `auto` there, uneven hosts, ranks that
// disagree, a lost rank.
#include <torch/torch.h>

#include "multiproc/ddp_models.h"
#include "dpx/dpx.h"
#include "support/expect_throws.h"
#include "support/harness.h"
#include "support/launcher_harness.h"
#include "support/netns_hosts.h"

namespace dpx::test {
namespace {

using std::chrono::seconds;

constexpr std::uint16_t kStorePort = 29511;  // on host a, in a namespace made for the test

// Runs fn(rank) on `world` processes, rank r on host a when on_a[r], else on host b. Rank 0
// (which must be on host a) serves the store, and keeps it until every rank but `dies` is done.
void run_on_hosts(const TwoHosts& hosts, const std::vector<bool>& on_a,
                  const std::function<void(int rank, std::shared_ptr<Store> store)>& fn,
                  int dies = -1) {
  const int world = static_cast<int>(on_a.size());
  auto results = run_processes(world, [&](int rank) {
    on_a[rank] ? hosts.enter_a() : hosts.enter_b();
    TcpStoreOptions o;
    o.host = TwoHosts::kAddrA;
    o.port = kStorePort;
    o.is_server = rank == 0;
    o.timeout = seconds(60);
    auto store = Store::tcp(o);
    fn(rank, store);
    store->set("done/" + std::to_string(rank), "");
    std::vector<std::string> others;
    for (int r = 1; r < world; ++r) {
      if (r != dies) others.push_back("done/" + std::to_string(r));
    }
    if (rank == 0 && !others.empty()) store->wait(others);
  }, ProcOptions{seconds(180)});
  for (const auto& r : results) {
    if (r.rank != dies) EXPECT_TRUE(r.ok()) << "rank " << r.rank << ":\n" << r.output;
  }
}

// Rank r's tensor: small integers, so every reduction is exact in every dtype and order.
at::Tensor contribution(int rank, int64_t numel, at::ScalarType dt) {
  return at::arange(numel, at::kLong).remainder(3).add(1).mul(rank + 1).to(dt);
}

at::Tensor expected(ReduceOp op, int world, int64_t numel, at::ScalarType dt) {
  auto all = at::stack([&] {
    std::vector<at::Tensor> v;
    for (int r = 0; r < world; ++r) v.push_back(contribution(r, numel, at::kDouble));
    return v;
  }());
  switch (op) {
    case ReduceOp::kSum: return all.sum(0).to(dt);
    case ReduceOp::kAvg: return all.mean(0).to(dt);
    case ReduceOp::kMin: return std::get<0>(all.min(0)).to(dt);
    case ReduceOp::kMax: return std::get<0>(all.max(0)).to(dt);
    case ReduceOp::kProduct: return all.prod(0).to(dt);
  }
  return {};
}

ProcessGroup::Options timeout_of(seconds s) {
  ProcessGroup::Options o;
  o.timeout = s;
  return o;
}

// Every reduce op, dtype and a size past one shm slot: the hierarchical result equals flat
// gloo's and the exact value, bit for bit.
void check_against_flat(ProcessGroup& hier, ProcessGroup& flat) {
  const int r = hier.rank(), w = hier.size();
  for (auto dt : {at::kFloat, at::kDouble, at::kBFloat16, at::kLong}) {
    for (int64_t numel : {int64_t{37}, int64_t{300001}}) {
      for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                      ReduceOp::kProduct}) {
        if (op == ReduceOp::kAvg && !at::isFloatingType(dt)) continue;
        SCOPED_TRACE(std::string(to_string(op)) + " on " + std::to_string(numel) + " " +
                     c10::toString(dt));
        auto a = contribution(r, numel, dt), b = a.clone();
        hier.allreduce(a, {op})->wait();
        flat.allreduce(b, {op})->wait();
        // Gloo's average divides each rank's tensor before the sum, this one the sum: equal
        // where the division is exact (a world of a power of two), else this one is the exact
        // average correctly rounded.
        if (op != ReduceOp::kAvg || (w & (w - 1)) == 0) EXPECT_TRUE(a.equal(b));
        EXPECT_TRUE(a.equal(expected(op, w, numel, dt)));
      }
    }
  }
  for (int root = 0; root < w; ++root) {
    auto t = r == root ? contribution(root, 1000, at::kFloat) : at::zeros({1000});
    hier.broadcast(t, {root})->wait();
    EXPECT_TRUE(t.equal(contribution(root, 1000, at::kFloat))) << "root " << root;
  }
  auto gathered = at::empty({w * 5}, at::kLong);
  hier.allgather(gathered, contribution(r, 5, at::kLong))->wait();
  for (int q = 0; q < w; ++q) {
    EXPECT_TRUE(gathered.narrow(0, q * 5, 5).equal(contribution(q, 5, at::kLong))) << q;
  }
  auto in = at::cat(std::vector<at::Tensor>(w, contribution(r, 7, at::kLong)));
  auto out = at::empty({7}, at::kLong);
  hier.reduce_scatter(out, in)->wait();
  EXPECT_TRUE(out.equal(expected(ReduceOp::kSum, w, 7, at::kLong)));
  hier.barrier()->wait();
}

#define SKIP_WITHOUT_NETNS()                                               \
  if (auto why = TwoHosts::why_not(); !why.empty()) GTEST_SKIP() << why; \
  TwoHosts hosts;                                                          \
  ASSERT_TRUE(hosts.ok()) << "could not set up the network namespaces"

TEST(Hierarchical, TwoHostsOfTwoRanksMatchFlatGlooForEveryOp) {
  SKIP_WITHOUT_NETNS();
  run_on_hosts(hosts, {true, true, false, false}, [](int rank, std::shared_ptr<Store> store) {
    auto opts = timeout_of(seconds(60));
    auto picked = new_process_group("auto", Store::prefix("auto", store), rank, 4, opts);
    EXPECT_EQ(picked->backend(), "hierarchical");
    auto flat = new_process_group("gloo", Store::prefix("flat", store), rank, 4, opts);
    check_against_flat(*picked, *flat);
  });
}

// Ranks 0 and 2 on host a, rank 1 alone on host b: hosts of different sizes, not in blocks.
TEST(Hierarchical, UnevenInterleavedHostsMatchFlatGloo) {
  SKIP_WITHOUT_NETNS();
  run_on_hosts(hosts, {true, false, true}, [](int rank, std::shared_ptr<Store> store) {
    auto opts = timeout_of(seconds(60));
    auto hier = new_process_group("hierarchical", Store::prefix("h", store), rank, 3, opts);
    auto flat = new_process_group("gloo", Store::prefix("flat", store), rank, 3, opts);
    check_against_flat(*hier, *flat);
  });
}

// One rank per host: nothing to do inside a host, so `auto` keeps plain gloo.
TEST(Hierarchical, AutoKeepsGlooWithOneRankPerHost) {
  SKIP_WITHOUT_NETNS();
  run_on_hosts(hosts, {true, false}, [](int rank, std::shared_ptr<Store> store) {
    EXPECT_EQ(new_process_group("auto", store, rank, 2, timeout_of(seconds(60)))->backend(),
              "gloo");
  });
}

// Shared memory crosses network namespaces (one kernel, one pid namespace), so asking for shm
// there still works; `auto` treats them as hosts (Note [What a host is]).
TEST(Hierarchical, ShmAskedForStillJoinsRanksInTwoNetworkNamespaces) {
  SKIP_WITHOUT_NETNS();
  run_on_hosts(hosts, {true, false}, [](int rank, std::shared_ptr<Store> store) {
    auto pg = new_process_group("shm", store, rank, 2, timeout_of(seconds(60)));
    auto t = at::full({3}, rank + 1.0);
    pg->allreduce(t)->wait();
    EXPECT_TRUE(t.equal(at::full({3}, 3.0)));
  });
}

// A disagreement found inside one host (rank 3's size) or between the hosts (host b's size)
// raises MismatchError on every rank, and the group goes on working.
TEST(Hierarchical, RanksThatDisagreeAllRaiseAndTheGroupStaysUsable) {
  SKIP_WITHOUT_NETNS();
  run_on_hosts(hosts, {true, true, false, false}, [](int rank, std::shared_ptr<Store> store) {
    auto pg = new_process_group("hierarchical", store, rank, 4, timeout_of(seconds(60)));
    auto inside = at::ones({rank == 3 ? 11 : 10});
    auto msg = expect_throws<MismatchError>([&] { pg->allreduce(inside)->wait(); });
    EXPECT_NE(msg.find("ranks disagree on the collective"), std::string::npos) << msg;
    auto between = at::ones({rank >= 2 ? 12 : 10});
    msg = expect_throws<MismatchError>([&] { pg->allreduce(between)->wait(); });
    EXPECT_NE(msg.find("between the hosts"), std::string::npos) << msg;
    auto t = at::full({10}, rank + 1.0);
    pg->allreduce(t)->wait();
    EXPECT_TRUE(t.equal(at::full({10}, 10.0)));
  });
}

// The victim dies between two all-reduces: its host finds out over shm (or, for a leader, the
// other host through its closed gloo connection), the other host through its leader; every other
// rank raises PeerLostError long before the timeout, and again on the next collective.
void lose_rank(const TwoHosts& hosts, int victim) {
  run_on_hosts(hosts, {true, true, false, false}, [victim](int rank, std::shared_ptr<Store> store) {
    auto pg = new_process_group("hierarchical", store, rank, 4, timeout_of(seconds(100)));
    auto t = at::ones({1000});
    pg->allreduce(t)->wait();
    if (rank == victim) kill_this_rank();
    const auto start = std::chrono::steady_clock::now();
    expect_throws<PeerLostError>([&] { pg->allreduce(t)->wait(); });
    EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(50));
    expect_throws<PeerLostError>([&] { pg->allreduce(t)->wait(); });  // broken for good
  }, victim);
}

TEST(Hierarchical, ALostRankEndsEveryOtherRankWithPeerLostError) {
  SKIP_WITHOUT_NETNS();
  lose_rank(hosts, 3);  // host b, not its leader
}

TEST(Hierarchical, ALostLeaderEndsEveryOtherRankWithPeerLostError) {
  SKIP_WITHOUT_NETNS();
  lose_rank(hosts, 2);  // host b's leader
}

std::vector<torch::Tensor> trained(std::shared_ptr<ProcessGroup> pg, int rank) {
  torch::manual_seed(rank);  // DDP's first broadcast makes rank 0's parameters everyone's
  Mlp net;
  DistributedDataParallelOptions o;
  o.bucket_cap_mb = 0.002;  // several buckets, so all-reduces queue behind each other
  DistributedDataParallel ddp(net, pg, o);
  torch::optim::SGD opt(ddp->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (const auto& batch : make_batches(3, pg->size(), 5, {16})) {
    const Batch b = slice(batch, rank, pg->size());
    opt.zero_grad();
    torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
    opt.step();
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

// DDP trains over the hierarchical group as over flat gloo (sums in another order: to float
// rounding).
TEST(Hierarchical, DdpTrainsAsOverFlatGloo) {
  SKIP_WITHOUT_NETNS();
  run_on_hosts(hosts, {true, true, false, false}, [](int rank, std::shared_ptr<Store> store) {
    auto opts = timeout_of(seconds(60));
    auto hier = trained(new_process_group("hierarchical", Store::prefix("h", store), rank, 4,
                                          opts), rank);
    auto flat = trained(new_process_group("gloo", Store::prefix("g", store), rank, 4, opts),
                        rank);
    expect_params_close(hier, flat);
  });
}

// Through the launcher (env://, a rendezvous per host, no network variable): `dpxrun --check`
// names hierarchical as `auto`'s choice and runs an all-reduce on it.
TEST(Hierarchical, DpxrunCheckOnTwoHostsOfTwoRanksPicksAndRunsIt) {
  SKIP_WITHOUT_NETNS();
  const std::vector<std::string> flags = {
      "--check", "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
      "--rdzv-endpoint", std::string(TwoHosts::kAddrA) + ":29400", "--rdzv-id", "hier",
      "--monitor-interval", "0.05", "--stop-grace", "2",
      "--rdzv-conf", "join_timeout=30,last_call_timeout=1,close_timeout=10"};
  auto command = [&](std::vector<std::string> prefix) {
    prefix.push_back(dpxrun_path());
    prefix.insert(prefix.end(), flags.begin(), flags.end());
    return prefix;
  };
  LaunchOptions o;
  o.unset_env = {"GLOO_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "DPX_BACKEND"};
  Launch a(command(hosts.exec_a()), o);
  Launch b(command(hosts.exec_b()), o);
  auto ra = a.wait(seconds(120)), rb = b.wait(seconds(120));
  ASSERT_EQ(ra.exit_code, 0) << ra.output << "\n--- host b:\n" << rb.output;
  ASSERT_EQ(rb.exit_code, 0) << rb.output << "\n--- host a:\n" << ra.output;
  const std::string both = ra.output + rb.output;
  EXPECT_NE(both.find("backend: auto picks hierarchical"), std::string::npos) << both;
  EXPECT_NE(both.find("hierarchical: all 4 ranks reach each other"), std::string::npos) << both;
}

// On one host a DPX_BACKEND=hierarchical group is shm inside plus flat gloo, and `auto` still
// picks shm.
TEST(Hierarchical, OneHostAutoPicksShmAndTheVariableSelectsHierarchical) {
  StoreServer server;
  expect_all_ok(run_processes(2, [&](int rank) {
    auto store = server.client();
    auto opts = timeout_of(seconds(60));
    EXPECT_EQ(new_process_group("auto", Store::prefix("a", store), rank, 2, opts)->backend(),
              "shm");
    ::setenv("DPX_BACKEND", "hierarchical", 1);
    auto pg = new_process_group("auto", Store::prefix("b", store), rank, 2, opts);
    EXPECT_EQ(pg->backend(), "hierarchical");
    auto t = at::full({5}, rank + 1.0);
    pg->allreduce(t, {ReduceOp::kAvg})->wait();
    EXPECT_TRUE(t.equal(at::full({5}, 1.5)));
    auto b = at::full({5}, rank + 1.0);
    pg->broadcast(b, {1})->wait();
    EXPECT_TRUE(b.equal(at::full({5}, 2.0)));
  }));
}

}  // namespace
}  // namespace dpx::test
