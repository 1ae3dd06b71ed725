// The device-independent parts of dpx's CUDA support: device choice, backend choice, the
// translation of NCCL errors, and the errors a machine without a GPU gives. Tests that run on
// any machine keep Cuda and Nccl out of their names: scripts/gpu_check.sh picks GPU tests by
// those words.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/torch.h>

#include <thread>

#include "comm/backends/nccl/translate.h"
#include "runtime/cuda/local_device.h"
#include "dpx/dpx.h"
#include "support/expect_throws.h"

namespace dpx {
namespace {

using ::testing::HasSubstr;

TEST(DeviceChoice, CpuAndIndexedDevicesPassThrough) {
  EXPECT_EQ(detail::resolve_device(at::kCPU, 3, 0), at::Device(at::kCPU));
  EXPECT_EQ(detail::resolve_device(at::Device("cuda:1"), 0, 2), at::Device("cuda:1"));
}

TEST(DeviceChoice, LocalRankPicksTheGpuModuloTheGpusPresent) {
  EXPECT_EQ(detail::resolve_device(at::Device("cuda"), 1, 4), at::Device("cuda:1"));
  EXPECT_EQ(detail::resolve_device(at::Device("cuda"), 5, 4), at::Device("cuda:1"));
  EXPECT_EQ(detail::resolve_device(at::Device("cuda"), 2, 1), at::Device("cuda:0"));
  EXPECT_EQ(detail::resolve_device(at::Device("cuda"), std::nullopt, 2), at::Device("cuda:0"));
}

TEST(DeviceChoice, MissingDevicesAreClearErrors) {
  auto none = test::expect_throws<c10::Error>(
      [] { detail::resolve_device(at::Device("cuda"), 0, 0); });
  EXPECT_THAT(none, HasSubstr("sees no CUDA device"));
  auto beyond = test::expect_throws<c10::Error>(
      [] { detail::resolve_device(at::Device("cuda:2"), 0, 2); });
  EXPECT_THAT(beyond, HasSubstr("cuda:2 does not exist"));
  EXPECT_THAT(beyond, HasSubstr("cuda:0 to cuda:1"));
  auto negative = test::expect_throws<c10::Error>(
      [] { detail::resolve_device(at::Device("cuda"), -1, 2); });
  EXPECT_THAT(negative, HasSubstr("LOCAL_RANK is -1"));
  auto other = test::expect_throws<c10::Error>(
      [] { detail::resolve_device(at::Device("meta"), 0, 2); });
  EXPECT_THAT(other, HasSubstr("use cpu or cuda"));
}

TEST(DeviceChoice, WithoutGpusAskingForAGpuFailsBeforeConnecting) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  ProcessGroup::Options o;
  o.device = at::Device("cuda");
  auto msg = test::expect_throws<c10::Error>(
      [&] { new_process_group("auto", Store::hash(), 0, 1, o); });
  EXPECT_THAT(msg, HasSubstr("sees no CUDA device"));
}

// A rank on cuda:1 must not work on GPU 0 by default: init_process_group makes its GPU the
// calling thread's current one (a thread of its own here, so the test's thread stays as it is).
TEST(CudaDevice, InitProcessGroupMakesTheRanksGpuCurrent) {
  if (cuda::device_count() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  std::thread([] {
    InitOptions o;
    o.store = Store::hash();
    o.rank = 0;
    o.world_size = 1;
    o.backend = "gloo";
    o.device = at::Device("cuda:1");
    o.process = std::nullopt;
    auto pg = init_process_group(o);
    EXPECT_EQ(c10::impl::getDeviceGuardImpl(at::kCUDA)->getDevice(), at::Device("cuda:1"));
  }).join();
}

TEST(DeviceBackendChoice, TheGpuBackendOnTheCpuIsAClearError) {
  auto msg = test::expect_throws<c10::Error>(
      [] { new_process_group("nccl", Store::hash(), 0, 1); });
  EXPECT_THAT(msg, HasSubstr("nccl works on CUDA devices only"));
}

TEST(DeviceBackendChoice, UnknownBackendsListTheKnownOnes) {
  auto msg = test::expect_throws<c10::Error>(
      [] { new_process_group("ucc", Store::hash(), 0, 1); });
  EXPECT_THAT(msg,
              HasSubstr("use auto, shm, gloo, hierarchical, nccl, mpi or hierarchical-mpi"));
}

// c10d's texts (Note [NCCL error words] in comm/backends/nccl/translate.cpp) as the typed errors.
void rethrow(const std::string& text) {
  detail::rethrow_nccl_error(std::runtime_error(text), "[rank 0/2 h:1] ", "allreduce",
                             std::chrono::milliseconds(500));
}

TEST(GpuBackendErrors, TimeoutsBecomeTimeoutError) {
  auto msg = test::expect_throws<TimeoutError>([] {
    rethrow("[PG ID 0 Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, "
            "OpType=ALLREDUCE) ran for 600012 milliseconds before timing out."
            "\nException raised from checkTimeout at ...");
  });
  EXPECT_THAT(msg, HasSubstr("[rank 0/2 h:1] nccl allreduce did not finish within 500 ms"));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("Exception raised from")));
}

TEST(GpuBackendErrors, AVanishedPeerBecomesPeerLostError) {
  auto msg = test::expect_throws<PeerLostError>([] {
    rethrow("NCCL error in: ProcessGroupNCCL.cpp:1, remote process exited or there was a "
            "network error, NCCL version 2.30.3\nncclRemoteError: A call failed possibly due "
            "to a network error or a remote process exiting prematurely.");
  });
  EXPECT_THAT(msg, HasSubstr("nccl allreduce failed: a peer is gone"));
  test::expect_throws<PeerLostError>([] { rethrow("socket: Connection closed by peer"); });
}

TEST(GpuBackendErrors, OtherFailuresBecomeDistributedErrorAndDpxErrorsPassThrough) {
  auto msg = test::expect_throws<DistributedError>(
      [] { rethrow("NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)"); });
  EXPECT_THAT(msg, HasSubstr("nccl allreduce failed: NCCL error: invalid usage"));
  auto kept = test::expect_throws<PeerLostError>([] {
    try {
      throw PeerLostError("original");
    } catch (const std::exception& e) {
      detail::rethrow_nccl_error(e, "", "barrier", std::chrono::milliseconds(1));
    }
  });
  EXPECT_EQ(kept, "original");
}

}  // namespace
}  // namespace dpx
