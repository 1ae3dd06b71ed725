// Which ranks share a host, who leads each host, and the backend a group gets from that
// (comm/plan/: one parser of names, one placement, one choice; Note [Backend choice]).
#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/plan/choose.h"
#include "dpx/runtime/cuda.h"
#include "support/expect_throws.h"

namespace dpx::detail {
namespace {

using Ranks = std::vector<std::vector<int>>;

TEST(HostLayout, HostsAreNumberedByTheirLowestRankAndLedByIt) {
  const HostLayout l = host_layout({"b", "a", "b", "a", "c"});
  EXPECT_EQ(l.ranks_of, (Ranks{{0, 2}, {1, 3}, {4}}));
  EXPECT_EQ(l.host_of, (std::vector<int>{0, 1, 0, 1, 2}));
  EXPECT_EQ(l.local_rank_of, (std::vector<int>{0, 0, 1, 1, 0}));
  EXPECT_EQ(l.hosts(), 3);
  EXPECT_EQ(l.leader(0), 0);
  EXPECT_EQ(l.leader(1), 1);
  EXPECT_EQ(l.leader(2), 4);
  EXPECT_TRUE(l.is_leader(1));
  EXPECT_FALSE(l.is_leader(3));
  EXPECT_EQ(l.local_size(3), 2);
  EXPECT_EQ(l.local_size(4), 1);
  EXPECT_TRUE(l.shares_a_host());
}

TEST(HostLayout, UnevenHostsInBlocks) {
  const HostLayout l = host_layout({"x", "y", "y", "y"});
  EXPECT_EQ(l.ranks_of, (Ranks{{0}, {1, 2, 3}}));
  EXPECT_EQ(l.local_rank_of, (std::vector<int>{0, 0, 1, 2}));
  EXPECT_EQ(l.local_size(0), 1);
  EXPECT_EQ(l.local_size(2), 3);
}

// The choice on `layout`'s hosts, with `shared` saying whether two ranks share a device.
Backend choose(Backend asked, bool on_device, bool nccl_built, const HostLayout& layout,
               bool shared = false) {
  const Placement p{layout, shared};
  return choose_backend(asked, on_device, nccl_built, [&]() -> const Placement& { return p; });
}

TEST(BackendChoice, AutoOnTheCpuPicksShmOnOneHost) {
  EXPECT_EQ(choose(Backend::kAuto, false, true, host_layout({"a"})), Backend::kShm);
  EXPECT_EQ(choose(Backend::kAuto, false, true, host_layout({"a", "a", "a"}), true), Backend::kShm);
}

TEST(BackendChoice, AutoOnTheCpuPicksHierarchicalOverSeveralHostsWithSeveralRanksOnOne) {
  EXPECT_EQ(choose(Backend::kAuto, false, true, host_layout({"a", "a", "b", "b"})),
            Backend::kHierarchical);
  EXPECT_EQ(choose(Backend::kAuto, false, false, host_layout({"a", "b", "b"})),
            Backend::kHierarchical);
}

TEST(BackendChoice, AutoOnTheCpuPicksGlooWithOneRankPerHost) {
  EXPECT_EQ(choose(Backend::kAuto, false, true, host_layout({"a", "b"})), Backend::kGloo);
  EXPECT_EQ(choose(Backend::kAuto, false, true, host_layout({"a", "b", "c"})), Backend::kGloo);
}

TEST(BackendChoice, AutoOnAGpuTakesTheGpuBackendUnlessRanksShareAGpu) {
  const HostLayout one = host_layout({"a", "a"}), two = host_layout({"a", "a", "b", "b"});
  EXPECT_EQ(choose(Backend::kAuto, true, true, one), Backend::kNccl);
  EXPECT_EQ(choose(Backend::kAuto, true, true, two), Backend::kNccl);
  EXPECT_EQ(choose(Backend::kAuto, true, true, one, true), Backend::kShm);
  EXPECT_EQ(choose(Backend::kAuto, true, true, two, true), Backend::kGloo);  // never hierarchical
  EXPECT_EQ(choose(Backend::kAuto, true, false, one), Backend::kShm);       // no NCCL built
  EXPECT_EQ(choose(Backend::kAuto, true, false, two), Backend::kGloo);
}

TEST(BackendChoice, ANamedBackendIsKeptWithoutLookingAtThePlacement) {
  auto unused = []() -> const Placement& {
    ADD_FAILURE() << "placement gathered for a named backend";
    static const Placement none;
    return none;
  };
  for (Backend b : {Backend::kShm, Backend::kGloo, Backend::kNccl, Backend::kHierarchical,
                    Backend::kMpi}) {
    for (bool on_device : {false, true}) EXPECT_EQ(choose_backend(b, on_device, true, unused), b);
  }
}

TEST(BackendChoice, PlacementTellsHostsAndSharedDevicesApart) {
  const Placement p = placement_of({"h1\n0", "h1\n1", "h2\n0", "h2\n1"});
  EXPECT_EQ(p.hosts.hosts(), 2);
  EXPECT_FALSE(p.device_shared);  // the same index on two hosts is two devices
  EXPECT_TRUE(placement_of({"h1\n0", "h2\n1", "h1\n0"}).device_shared);
  EXPECT_TRUE(placement_of({"h\ncpu", "h\ncpu"}).device_shared);
  EXPECT_EQ(device_identity(at::kCPU), "cpu");
}

// Two ranks with CUDA_VISIBLE_DEVICES of their own both say cuda:0: only the bus id tells
// whether they share the GPU. Needs a GPU (the driver answers); the pure part is above.
TEST(BackendChoice, AGpuIsNamedByItsPciBusIdNotItsIndex) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: the driver's PCI bus id";
  const std::string id = device_identity(at::Device("cuda:0"));
  EXPECT_NE(id, "cuda:0");
  EXPECT_EQ(id.size(), std::string("0000:00:00.0").size()) << id;
  EXPECT_EQ(id[4], ':') << id;
}

TEST(BackendChoice, NamesAreParsedOnceAndABadOneListsTheGoodOnes) {
  for (const char* name :
       {"auto", "shm", "gloo", "nccl", "hierarchical", "mpi", "hierarchical-mpi"}) {
    EXPECT_STREQ(to_string(parse_backend(name)), name);
  }
  auto msg = test::expect_throws<c10::Error>([] { parse_backend("ucc"); });
  EXPECT_NE(msg.find("unknown backend 'ucc'; use auto, shm, gloo, hierarchical, nccl, mpi or "
                     "hierarchical-mpi"), std::string::npos) << msg;
  ::setenv("DPX_BACKEND", "gloo", 1);
  EXPECT_EQ(requested_backend("auto"), Backend::kGloo);  // the variable replaces auto only
  EXPECT_EQ(requested_backend("shm"), Backend::kShm);
  ::setenv("DPX_BACKEND", "tcp", 1);
  EXPECT_THROW(requested_backend("auto"), c10::Error);
  ::unsetenv("DPX_BACKEND");
  EXPECT_EQ(requested_backend("auto"), Backend::kAuto);
}

}  // namespace
}  // namespace dpx::detail
