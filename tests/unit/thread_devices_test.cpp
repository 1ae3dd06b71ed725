// The device (and stream) each thread dpx starts works on (Note [Thread devices] in
// runtime/cuda/local_device.h), on any machine: c10's FakeGuardImpl stands in for CUDA's device guard.
// It keeps each thread's current device and streams, as CUDA does, and answers for 8 devices;
// no test here launches a kernel or allocates device memory.
#include <c10/core/StreamGuard.h>
#include <torch/torch.h>

#include <atomic>
#include <thread>

#include "comm/coordination/issuer.h"
#include "observe/stall_inspector.h"
#include "dpx/dpx.h"
#include "support/fake_cuda_devices.h"

namespace dpx {
namespace {

using test::FakeCuda;
using test::FakeCudaDevices;
using std::chrono::milliseconds;

std::atomic<int> g_polled_on{-1};

// The stall inspector asks c10d's works whether their CUDA events completed: from a thread
// whose device is the group's, or CUDA makes a context on GPU 0 in every rank.
TEST(ThreadDevices, TheStallInspectorPollsOnItsGroupsDevice) {
  FakeCudaDevices fake;
  g_polled_on = -1;
  auto pending = std::make_shared<int>(0);
  {
    detail::StallInspector inspector(
        Store::hash(), 0, 2, "", milliseconds(40), milliseconds(10000),
        [](void*) {
          g_polled_on = FakeCuda::getDeviceIndex();
          return false;
        },
        at::Device("cuda:3"));
    inspector.issued(1, "allreduce", at::Tensor(), nullptr, pending);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (g_polled_on == -1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(5));
    }
  }
  EXPECT_EQ(g_polled_on, 3);
}

// A staged group's issuer waits for device copies and hands collectives over: on the group's
// device.
TEST(ThreadDevices, TheIssuerLaunchesOnItsGroupsDevice) {
  FakeCudaDevices fake;
  detail::Issuer issuer(milliseconds(10000), "", "test", at::Device("cuda:5"));
  int launched_on = -1;
  auto work = issuer.submit([&] {
    launched_on = FakeCuda::getDeviceIndex();
    auto done = std::make_shared<CompletionWork>(milliseconds(1000), "");
    done->complete();
    return done;
  });
  work->wait();
  EXPECT_EQ(launched_on, 5);
}

// new_process_group, not only init_process_group, makes the rank's device current on the
// calling thread (a thread of its own here, whose device starts at 0). "cuda" is LOCAL_RANK's.
TEST(ThreadDevices, NewProcessGroupMakesTheRanksDeviceCurrent) {
  FakeCudaDevices fake;
  std::thread([] {
    ProcessGroup::Options o;
    o.device = at::Device("cuda:2");
    auto pg = new_process_group("shm", Store::hash(), 0, 1, o);
    EXPECT_EQ(pg->backend(), "shm-staged");
    EXPECT_EQ(FakeCuda::getDeviceIndex(), 2);
    pg->barrier()->wait();  // issued from the group's issuer, on cuda:2 too
  }).join();
}

// Each replica runs on its device with the caller's current stream there
// (Note [Replica streams]), not on its thread's default stream, and the caller's own streams stay as they were.
TEST(ThreadDevices, ReplicasRunOnTheCallersStreams) {
  FakeCudaDevices fake;
  const at::Device d0("cuda:0"), d1("cuda:1");
  const c10::Stream s0(c10::Stream::UNSAFE, d0, 7), s1(c10::Stream::UNSAFE, d1, 9);
  const c10::StreamGuard on_s0(s0);
  const c10::StreamGuard on_s1(s1);  // the caller now works on cuda:1
  std::vector<std::shared_ptr<torch::nn::Module>> replicas;
  for (int i = 0; i < 3; ++i) replicas.push_back(std::make_shared<torch::nn::Module>());
  ParallelApplyOptions options;
  options.devices = {d0, d1, d1};
  const auto seen = parallel_apply(
      replicas, std::vector<c10::IValue>(3, c10::IValue(0)),
      [](torch::nn::Module&, const c10::IValue&) {
        const auto device = FakeCuda::getDeviceIndex();
        return c10::IValue(std::vector<int64_t>{device, FakeCuda::getCurrentStreamIdFor(device)});
      },
      options);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].toIntVector(), (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(seen[1].toIntVector(), (std::vector<int64_t>{1, 9}));
  EXPECT_EQ(seen[2].toIntVector(), (std::vector<int64_t>{1, 9}));
  EXPECT_EQ(FakeCuda::getDeviceIndex(), 1);
  EXPECT_EQ(FakeCuda::getCurrentStreamIdFor(0), 7);
}

// A group whose works can be asked whether they completed only while it stands, as c10d's nccl
// works read the communicator that NcclGroup's shutdown() destroys; its destructor stops the
// inspector first, as NcclGroup's does, then tears down and lingers.
std::atomic<bool> g_torn_down{false};
std::atomic<int> g_polls{0}, g_polls_after_teardown{0};

class TeardownWork : public Work {
 public:
  TeardownWork() : Work(milliseconds(1000)) {}
  void wait(milliseconds) override {}
  bool is_completed() override {
    ++g_polls;
    if (g_torn_down) ++g_polls_after_teardown;
    std::this_thread::sleep_for(milliseconds(2));  // a poll that takes a while
    if (g_torn_down) ++g_polls_after_teardown;
    return false;  // pending: asked again every tick
  }
  std::exception_ptr exception() override { return nullptr; }
};

class TeardownGroup : public ProcessGroup {
 public:
  TeardownGroup() : ProcessGroup(0, 2, options_with_inspector()) {}
  ~TeardownGroup() override {
    stop_stall_inspector();
    g_torn_down = true;
    std::this_thread::sleep_for(milliseconds(50));  // several ticks of a running inspector
  }
  std::string backend() const override { return "teardown"; }

 protected:
  std::shared_ptr<Work> do_allreduce(at::Tensor&, const AllreduceOptions&) override {
    return std::make_shared<TeardownWork>();
  }
  std::shared_ptr<Work> do_broadcast(at::Tensor&, const BroadcastOptions&) override {
    TORCH_CHECK(false, "not used");
  }
  std::shared_ptr<Work> do_allgather(at::Tensor&, const at::Tensor&) override {
    TORCH_CHECK(false, "not used");
  }
  std::shared_ptr<Work> do_reduce_scatter(at::Tensor&, const at::Tensor&,
                                          const ReduceScatterOptions&) override {
    TORCH_CHECK(false, "not used");
  }
  std::shared_ptr<Work> do_barrier() override { TORCH_CHECK(false, "not used"); }

 private:
  static Options options_with_inspector() {
    Options o;
    o.stall_threshold = milliseconds(40);  // a tick of 10 ms
    return o;
  }
};

TEST(InspectorShutdown, NoWorkIsAskedAnythingOnceTheGroupStoppedItsInspector) {
  g_torn_down = false;
  g_polls = 0;
  g_polls_after_teardown = 0;
  auto t = at::zeros({4});
  std::shared_ptr<Work> work;  // outlives the group: the inspector could still reach it
  {
    auto pg = std::make_shared<TeardownGroup>();
    pg->start_stall_inspector(Store::hash());
    work = pg->allreduce(t);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (g_polls < 3 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(5));
    }
  }
  EXPECT_GE(g_polls, 3);
  EXPECT_EQ(g_polls_after_teardown, 0);
}

}  // namespace
}  // namespace dpx
