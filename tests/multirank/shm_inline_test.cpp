// Collectives small enough to ride in the control line (Note [Inline data] and
// Note [Control line layout] in comm/backends/shm/segment.h) against the slot path just above:
// the same bits for every dtype and op, and ranks that disagree still told so.
#include <torch/torch.h>

#include "comm/backends/shm/segment.h"
#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx {
namespace {

constexpr auto kInline = static_cast<int64_t>(detail::shm::kInlineBytes);

// Values whose sums round (so the order shows in the bits), without the process-wide generator
// the rank threads would share.
at::Tensor random_values(int rank, int64_t n, at::ScalarType dt, int salt) {
  auto i = at::arange(n, at::kDouble);
  if (at::isIntegralType(dt, false)) {
    return i.add(rank * 3 + salt).remainder(19).sub(9).to(at::kLong).to(dt);
  }
  return i.add(1).mul(0.37 + rank * 1.13 + salt * 0.071).sin().mul(3).to(dt);
}

// Element i of an all-reduce depends only on element i of every rank, in rank order, so the first
// n elements of a message padded past the control line (the slot path) give the reference bits.
TEST(ShmInline, SameBitsAsTheSlotPathForEveryDtypeAndOp) {
  const at::ScalarType dtypes[] = {at::kFloat, at::kDouble, at::kInt, at::kLong, at::kBFloat16,
                                   at::kHalf};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kProduct};
  for (int world : {2, 3}) {
    auto store = Store::hash();
    auto errors = test::run_threads(world, [&](int rank) {
      auto pg = new_process_group("shm", store, rank, world);
      int salt = 0;
      for (auto dt : dtypes) {
        const int64_t es = at::elementSize(dt);
        // The largest that fits, one element, and the smallest that does not.
        for (int64_t n : {kInline / es, int64_t{1}, kInline / es + 1}) {
          for (auto op : ops) {
            if (op == ReduceOp::kAvg && at::isIntegralType(dt, false)) continue;
            SCOPED_TRACE(std::string(c10::toString(dt)) + " n=" + std::to_string(n) + " " +
                         to_string(op) + " world=" + std::to_string(world));
            ++salt;
            auto mine = random_values(rank, n, dt, salt);
            auto small = mine.clone();
            pg->allreduce(small, {op})->wait();
            auto padded = at::cat({mine, at::ones({64}, dt)});  // a data slot
            pg->allreduce(padded, {op})->wait();
            EXPECT_TRUE(small.equal(padded.narrow(0, 0, n)))
                << small << " against the slot path's " << padded.narrow(0, 0, n);
            // And the slot path itself is right: the reduction in rank order, here.
            if (op == ReduceOp::kAvg || dt == at::kBFloat16 || dt == at::kHalf) continue;
            at::Tensor want = random_values(0, n, dt, salt);
            for (int r = 1; r < world; ++r) {
              auto v = random_values(r, n, dt, salt);
              want = op == ReduceOp::kSum       ? want.add(v)
                     : op == ReduceOp::kProduct ? want.mul(v)
                     : op == ReduceOp::kMin     ? at::minimum(want, v)
                                                : at::maximum(want, v);
            }
            EXPECT_TRUE(small.equal(want)) << small << " want " << want;
          }
        }
      }
      // Broadcasts in and just past the line.
      for (int64_t n : {kInline / 4, kInline / 4 + 1}) {
        auto b = at::full({n}, float(rank + 1));
        pg->broadcast(b, {world - 1})->wait();
        EXPECT_TRUE(b.equal(at::full({n}, float(world))));
      }
    });
    for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }
}

// The line keeps digests of the descriptors, not the fields (Note [Control line layout]): calls
// that differ in any field are still caught before any data is read, and named.
TEST(ShmInline, DisagreeingCallsInTheLineAreStillAMismatch) {
  auto store = Store::hash();
  auto errors = test::run_threads(2, [&](int rank) {
    auto pg = new_process_group("shm", store, rank, 2);
    auto expect_mismatch = [&](const std::function<std::shared_ptr<Work>()>& issue,
                               const std::string& theirs) {
      try {
        issue()->wait();
        ADD_FAILURE() << "no error; expected one naming " << theirs;
      } catch (const MismatchError& e) {
        EXPECT_NE(std::string(e.what()).find(theirs), std::string::npos) << e.what();
      }
    };
    const int64_t fits = kInline / 4;
    auto sizes = at::ones({rank == 0 ? fits : fits + 1});  // the line against a slot
    expect_mismatch([&] { return pg->allreduce(sizes); },
                    std::to_string(rank == 0 ? fits + 1 : fits) + " Float");
    auto both_in_line = at::ones({rank == 0 ? fits : fits - 1});
    expect_mismatch([&] { return pg->allreduce(both_in_line); },
                    std::to_string(rank == 0 ? fits - 1 : fits) + " Float");
    auto ops = at::ones({fits});
    const ReduceOp op = rank == 0 ? ReduceOp::kSum : ReduceOp::kMax;
    expect_mismatch([&] { return pg->allreduce(ops, {op}); },
                    rank == 0 ? "allreduce(max)" : "allreduce(sum)");
    auto same_bytes = rank == 0 ? at::ones({fits}, at::kFloat) : at::ones({fits}, at::kInt);
    expect_mismatch([&] { return pg->allreduce(same_bytes); },
                    std::to_string(fits) + (rank == 0 ? " Int" : " Float"));
    auto b = at::ones({fits});
    expect_mismatch([&] { return pg->broadcast(b, {rank}); }, rank == 0 ? "root 1" : "root 0");
    auto t = at::full({fits}, float(rank + 1));
    pg->allreduce(t)->wait();  // the group stays usable
    EXPECT_TRUE(t.equal(at::full({fits}, 3.0f)));
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
}  // namespace dpx
