// The shm backend with real processes: the large (chunked) paths, peers that die or stall,
// ranks that disagree, and no segment left in /dev/shm.
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <iostream>

#include <torch/torch.h>

#include "comm/backends/shm/process_group_shm.h"
#include "comm/shared_memory.h"
#include "dpx/dpx.h"
#include "support/harness.h"
#include "support/temp_dir.h"

namespace dpx::shm_test {
namespace {

using std::chrono::milliseconds;
using test::with_timeout;

// Tiny slots and a tiny small-message limit, so tests of a few KB cross many rounds.
void use_tiny_slots() {
  ::setenv("DPX_SHM_SLOT_BYTES", "4096", 1);
  ::setenv("DPX_SHM_SMALL_BYTES", "256", 1);
}

// Entries in /dev/shm made by the shm backend in process `pid`.
int segments_of(int pid) {
  int n = 0;
  const std::string prefix = "dpx-" + std::to_string(pid) + "-";
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) n += std::string(e->d_name).rfind(prefix, 0) == 0;
    ::closedir(d);
  }
  return n;
}

// Rank r, element i: small integers (exact in every dtype) that differ across ranks and slices.
at::Tensor values(int rank, int64_t n, at::ScalarType dt) {
  return at::arange(n, at::kLong).remainder(5).add(rank + 1).to(dt);
}

at::Tensor expected(ReduceOp op, int world, int64_t n, at::ScalarType dt) {
  auto acc = values(0, n, at::kLong);
  for (int r = 1; r < world; ++r) {
    auto v = values(r, n, at::kLong);
    if (op == ReduceOp::kMax) acc = at::maximum(acc, v);
    else if (op == ReduceOp::kMin) acc = at::minimum(acc, v);
    else acc = acc.add(v);
  }
  return acc.to(dt);
}

TEST(ShmBackend, ChunkedPathsAcrossManyRounds) {
  for (int world : {2, 3}) {
    test::StoreServer server;
    auto results = test::run_processes(world, [&](int rank) {
      use_tiny_slots();
      auto pg = new_process_group("shm", server.client(), rank, world);
      for (auto dt : {at::kFloat, at::kBFloat16, at::kLong, at::kHalf}) {
        for (int64_t n : {0, 1, 63, 1000, 5001, 70001}) {
          SCOPED_TRACE(std::string(c10::toString(dt)) + " n=" + std::to_string(n));
          for (auto op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
            auto t = values(rank, n, dt);
            pg->allreduce(t, {op})->wait();
            EXPECT_TRUE(t.equal(expected(op, world, n, dt))) << to_string(op);
            auto in = at::cat({values(rank, n * world, dt)});
            auto out = at::empty({n}, dt);
            pg->reduce_scatter(out, in, {op})->wait();
            auto full = expected(op, world, n * world, dt);
            EXPECT_TRUE(out.equal(full.narrow(0, rank * n, n))) << to_string(op);
          }
          auto b = rank == world - 1 ? values(rank, n, dt) : at::zeros({n}, dt);
          pg->broadcast(b, {world - 1})->wait();
          EXPECT_TRUE(b.equal(values(world - 1, n, dt)));
          auto g = at::empty({n * world}, dt);
          pg->allgather(g, values(rank, n, dt))->wait();
          for (int q = 0; q < world; ++q) EXPECT_TRUE(g.narrow(0, q * n, n).equal(values(q, n, dt)));
        }
      }
    });
    test::expect_all_ok(results);
  }
}

TEST(ShmBackend, EveryRankGetsTheSameBits) {
  test::StoreServer server;
  const int world = 3;
  auto results = test::run_processes(world, [&](int rank) {
    auto pg = new_process_group("shm", server.client(), rank, world);
    // The one-post path with memcpy, at and past its streaming copy-in (32 KiB, a 20-byte tail
    // past the last full line), and the chunked path.
    for (int64_t n : {1000, 8191, 8192, 8197, 3 << 20}) {
      torch::manual_seed(rank);
      auto t = at::randn({n});
      auto want = t.clone();  // the sum in rank order, as both paths promise
      for (int r = 0; r < world; ++r) {
        torch::manual_seed(r);
        auto v = at::randn({n});
        want = r == 0 ? v : want.add(v);
      }
      pg->allreduce(t)->wait();
      EXPECT_TRUE(t.equal(want)) << "n=" << n;
      auto all = at::empty({world * n});
      pg->allgather(all, t)->wait();
      for (int q = 1; q < world; ++q) EXPECT_TRUE(all.narrow(0, q * n, n).equal(t));
    }
  });
  test::expect_all_ok(results);
}

TEST(ShmBackend, QueuedCollectivesRunInIssueOrder) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    auto pg = new_process_group("shm", server.client(), rank, 2);
    std::vector<at::Tensor> ts;
    std::vector<std::shared_ptr<Work>> works;
    for (int i = 0; i < 20; ++i) {
      ts.push_back(at::full({(i % 3) * 100000 + 7}, float(i + rank)));
      works.push_back(pg->allreduce(ts.back()));
    }
    for (int i = 0; i < 20; ++i) {
      works[i]->wait();
      EXPECT_TRUE(ts[i].equal(at::full_like(ts[i], float(2 * i + 1)))) << i;
    }
  });
  test::expect_all_ok(results);
}

TEST(ShmBackend, WaitWithAShortTimeoutReturnsWhileTheCollectiveRuns) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    auto pg = new_process_group("shm", server.client(), rank, 2);
    auto sync = server.client();
    auto t = at::ones({1000});
    if (rank == 1) sync->get("rank 0 gave up waiting");  // joins only after that
    auto work = pg->allreduce(t);
    if (rank == 0) {
      EXPECT_THROW(work->wait(milliseconds(50)), TimeoutError);  // rank 1 is not there yet
      EXPECT_FALSE(work->is_completed());
      sync->set("rank 0 gave up waiting", "1");
    }
    work->wait();  // the background thread finishes it once rank 1 joins
    EXPECT_TRUE(t.equal(at::full({1000}, 2.0f)));
  }, {std::chrono::seconds(30)});
  test::expect_all_ok(results);
}

TEST(ShmBackend, PeerKilledMidCollectiveRaisesPeerLost) {
  test::StoreServer server;
  // The group timeout is far beyond the harness's: only liveness checks can end this in time.
  auto results = test::run_processes(3, [&](int rank) {
    auto pg = new_process_group("shm", server.client(), rank, 3, with_timeout(std::chrono::minutes(5)));
    auto t = at::ones({1 << 20});
    pg->allreduce(t)->wait();
    if (rank == 2) ::raise(SIGKILL);
    try {
      for (int i = 0; i < 1000; ++i) pg->allreduce(t)->wait();
      ADD_FAILURE() << "collectives kept succeeding without rank 2";
    } catch (const PeerLostError& e) {
      std::cout << "typed: " << e.what() << "\n";
    }
    // The group stays failed, with the same typed error.
    EXPECT_THROW(pg->barrier()->wait(), PeerLostError);
  }, {std::chrono::seconds(60)});
  EXPECT_EQ(results[2].signal, SIGKILL);
  for (int r : {0, 1}) {
    EXPECT_TRUE(results[r].ok()) << results[r].output;
    EXPECT_NE(results[r].output.find("[rank " + std::to_string(r) + "/3 "), std::string::npos)
        << results[r].output;
  }
}

TEST(ShmBackend, PeerThatNeverCallsTimesOut) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    auto pg = new_process_group("shm", server.client(), rank, 2, with_timeout(milliseconds(1000)));
    auto sync = server.client();
    auto t = at::ones({4});
    if (rank == 0) {
      EXPECT_THROW(pg->allreduce(t)->wait(), TimeoutError);
      sync->set("rank 0 timed out", "1");
    } else {
      sync->get("rank 0 timed out");  // calls only after rank 0 gave up
      // Rank 0 gave up and told the group; this rank learns it instead of waiting again.
      EXPECT_THROW(pg->allreduce(t)->wait(), TimeoutError);
    }
  }, {std::chrono::seconds(30)});
  test::expect_all_ok(results);
}

TEST(ShmBackend, DisagreeingRanksGetAClearErrorAndStayUsable) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    use_tiny_slots();
    auto pg = new_process_group("shm", server.client(), rank, 2, with_timeout(milliseconds(5000)));
    auto expect_mismatch = [&](const std::function<std::shared_ptr<Work>()>& issue,
                               const std::string& theirs) {
      try {
        issue()->wait();
        ADD_FAILURE() << "no error";
      } catch (const DistributedError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("ranks disagree"), std::string::npos) << msg;
        EXPECT_NE(msg.find(theirs), std::string::npos) << msg;
      }
    };
    auto sizes = at::ones({rank == 0 ? 10 : 200000});  // one round against many
    expect_mismatch([&] { return pg->allreduce(sizes); }, rank == 0 ? "200000 Float" : "10 Float");
    auto inline_or_not = at::ones({rank == 0 ? 1 : 3}, at::kDouble);  // in the line or a slot
    expect_mismatch([&] { return pg->allreduce(inline_or_not); },
                    rank == 0 ? "3 Double" : "1 Double");
    auto dtypes = rank == 0 ? at::ones({8}, at::kFloat) : at::ones({8}, at::kInt);
    expect_mismatch([&] { return pg->allreduce(dtypes); }, rank == 0 ? "8 Int" : "8 Float");
    auto t = at::ones({8});
    expect_mismatch([&] { return rank == 0 ? pg->allreduce(t) : pg->barrier(); },
                    rank == 0 ? "barrier" : "allreduce(sum)");
    expect_mismatch([&] { return pg->broadcast(t, {rank}); }, rank == 0 ? "root 1" : "root 0");
    auto same = at::ones({5000});
    pg->allreduce(same)->wait();
    EXPECT_TRUE(same.equal(at::full({5000}, 2.0f)));
  }, {std::chrono::seconds(30)});
  test::expect_all_ok(results);
}

// A tensor in the group's shared memory (Note [Shared buckets]) is reduced in place, to the same
// bits as the copying path (rank order), on every rank, at any offset the ranks agree on.
TEST(ShmBackend, SharedMemoryReducesInPlaceToTheCopyingPathsBits) {
  for (int world : {2, 3}) {
    test::StoreServer server;
    auto results = test::run_processes(world, [&](int rank) {
      use_tiny_slots();
      auto pg = new_process_group("shm", server.client(), rank, world);
      auto* shared = dynamic_cast<detail::SharedMemory*>(pg.get());
      ASSERT_NE(shared, nullptr);
      at::Tensor memory = shared->allocate_shared(1 << 20);
      ASSERT_TRUE(memory.defined());
      for (auto dt : {at::kFloat, at::kDouble, at::kBFloat16, at::kLong}) {
        for (int64_t n : {1000, 70001}) {
          for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
            if (op == ReduceOp::kAvg && dt == at::kLong) continue;
            SCOPED_TRACE(std::string(c10::toString(dt)) + " n=" + std::to_string(n) + " " +
                         to_string(op));
            torch::manual_seed(rank * 7 + n);
            auto mine = dt == at::kLong ? at::randint(-1000, 1000, {n}, at::kLong)
                                        : at::randn({n}).to(dt);
            auto copied = mine.clone();
            pg->allreduce(copied, {op})->wait();
            const int64_t lines = 64 * 3 / at::elementSize(dt);  // a 64-byte-aligned offset
            auto in_place = memory.view(dt).narrow(0, lines, n);
            in_place.copy_(mine);
            const void* where = in_place.data_ptr();
            pg->allreduce(in_place, {op})->wait();
            EXPECT_EQ(in_place.data_ptr(), where);
            EXPECT_TRUE(in_place.equal(copied));
          }
        }
      }
    });
    test::expect_all_ok(results);
  }
}

TEST(ShmBackend, SharedMemoryAtDifferentPlacesIsAMismatch) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    auto pg = new_process_group("shm", server.client(), rank, 2, with_timeout(milliseconds(5000)));
    at::Tensor memory = dynamic_cast<detail::SharedMemory&>(*pg).allocate_shared(1 << 20);
    const int64_t n = 100000;
    auto expect_mismatch = [&](at::Tensor t, const std::string& text) {
      try {
        pg->allreduce(t)->wait();
        ADD_FAILURE() << "no error";
      } catch (const MismatchError& e) {
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      }
    };
    // Rank 1 would read rank 0's memory at the wrong place: both are told instead.
    auto shifted = memory.view(at::kFloat).narrow(0, rank == 0 ? 0 : 16, n);
    expect_mismatch(shifted, rank == 0 ? "in shared memory block 1 at byte 64" : "at byte 0");
    auto mixed = rank == 0 ? memory.view(at::kFloat).narrow(0, 0, n) : at::ones({n});
    expect_mismatch(mixed, "in shared memory block 1 at byte 0");
    // A second block, as a second DDP model makes: the same offset in another block would sum
    // two models' buckets.
    at::Tensor other = dynamic_cast<detail::SharedMemory&>(*pg).allocate_shared(1 << 20);
    auto apart = (rank == 0 ? memory : other).view(at::kFloat).narrow(0, 0, n);
    expect_mismatch(apart, rank == 0 ? "block 2 at byte 0" : "block 1 at byte 0");
    auto same = memory.view(at::kFloat).narrow(0, 0, n).fill_(rank + 1);
    pg->allreduce(same)->wait();
    EXPECT_TRUE(same.equal(at::full({n}, 3.0f)));
  }, {std::chrono::seconds(30)});
  test::expect_all_ok(results);
}

// DDP lays its buckets out in shared memory (Note [Shared buckets]): training gives the bits it
// gives with private buckets, with and without gradient_as_bucket_view, across the bucket rebuild.
TEST(ShmBackend, DdpWithSharedBucketsTrainsToThePrivateBucketsBits) {
  const int world = 3;  // dividing by 3 before the sum is not exact: the order must be the same
  for (bool view : {false, true}) {
    test::TempDir dir;
    for (const char* shared : {"1", "0"}) {
      test::StoreServer server;
      auto results = test::run_processes(world, [&](int rank) {
        ::setenv("DPX_SHM_SHARED_BUCKETS", shared, 1);
        at::set_num_threads(1);  // OpenMP's threads do not survive the fork
        auto pg = new_process_group("shm", server.client(), rank, world);
        torch::manual_seed(0);
        auto net = torch::nn::Sequential(torch::nn::Linear(32, 300), torch::nn::ReLU(),
                                         torch::nn::Linear(300, 200), torch::nn::ReLU(),
                                         torch::nn::Linear(200, 10));
        DistributedDataParallelOptions o;
        o.gradient_as_bucket_view = view;
        o.bucket_cap_mb = 0.1;  // buckets on both paths: the shared one and the one-post copy
        DistributedDataParallel ddp(net, pg, o);
        torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
        torch::manual_seed(100 + rank);
        for (int step = 0; step < 5; ++step) {  // the buckets are rebuilt after the first
          opt.zero_grad();
          ddp->forward(torch::randn({16, 32})).square().mean().backward();
          opt.step();
        }
        std::vector<at::Tensor> flat;
        for (const auto& p : net->parameters()) flat.push_back(p.detach().flatten());
        torch::save(at::cat(flat), dir / ("rank" + std::to_string(rank) + "-" + shared + ".pt"));
      });
      test::expect_all_ok(results);
    }
    for (int rank = 0; rank < world; ++rank) {
      at::Tensor with, without;
      torch::load(with, dir / ("rank" + std::to_string(rank) + "-1.pt"));
      torch::load(without, dir / ("rank" + std::to_string(rank) + "-0.pt"));
      EXPECT_TRUE(with.equal(without)) << "gradient_as_bucket_view=" << view << " rank " << rank
                                       << ": " << (with - without).abs().max().item<double>();
    }
  }
}

TEST(ShmBackend, NoSegmentOutlivesSetupOrACrash) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    auto pg = new_process_group("shm", server.client(), rank, 2);
    auto& shm = dynamic_cast<detail::ShmGroup&>(*pg);
    EXPECT_EQ(shm.segment_name().rfind("/proc/", 0), 0u) << shm.segment_name();
    EXPECT_EQ(segments_of(::getpid()), 0);
    if (rank == 1) ::raise(SIGKILL);
    auto t = at::ones({4});
    EXPECT_THROW(pg->allreduce(t)->wait(), PeerLostError);
  }, {std::chrono::seconds(30)});
  EXPECT_EQ(results[1].signal, SIGKILL);
  EXPECT_TRUE(results[0].ok()) << results[0].output;

  // Rank 1 never shows up: rank 0 gives up and removes the segment it made.
  test::StoreServer server2;
  results = test::run_processes(2, [&](int rank) {
    if (rank == 1) return;
    EXPECT_THROW(new_process_group("shm", server2.client(), 0, 2, with_timeout(milliseconds(500))),
                 TimeoutError);
    EXPECT_EQ(segments_of(::getpid()), 0);
  }, {std::chrono::seconds(30)});
  test::expect_all_ok(results);
}

TEST(ShmBackend, AutoPicksShmOnOneHostAndDpxBackendOverrides) {
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    EXPECT_EQ(new_process_group("auto", server.client(), rank, 2)->backend(), "shm");
    ::setenv("DPX_BACKEND", "gloo", 1);
    auto gloo = new_process_group("auto", server.client(), rank, 2);
    EXPECT_EQ(gloo->backend(), "gloo");
    gloo->barrier()->wait();  // neither rank leaves while the other still connects
  }, {std::chrono::seconds(30)});
  test::expect_all_ok(results);
}

}  // namespace
}  // namespace dpx::shm_test
