// DDP's step times (Note [Step times]) from device marks, read once the device has passed them
// and never by making a step wait; host clock readings where there are no marks (the CPU). Only
// sampled steps are timed, and their marks are reused. Fake marks stand for CUDA events here:
// each knows its device time and whether it is reached.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "ddp/step_times.h"

namespace dpx::detail {
namespace {

struct FakeMark;

// A device whose clock advances 10 ms at each mark made or recorded: marks at 0, 10, 20, ... ms
// in the order they are placed. Keeps every mark it made, for the test to look at.
struct FakeDevice {
  int ticks = 0;
  int recorded = 0;  // marks recorded again after being made
  std::vector<FakeMark*> marks;
  double tick() { return 10.0 * ticks++; }
  StepTimes::MarkFactory factory();
  void reach_all();
};

struct FakeMark : StreamMark {
  explicit FakeMark(FakeDevice& d) : device(d), at(d.tick()) {}
  void record() override {
    ++device.recorded;
    is_reached = false;
    at = device.tick();
  }
  bool reached() override { return is_reached; }
  void wait_reached() override {
    ++waits;
    is_reached = true;
  }
  double ms_since(StreamMark& earlier) override {
    auto& e = dynamic_cast<FakeMark&>(earlier);
    e.wait_reached();
    wait_reached();
    return at - e.at;
  }
  FakeDevice& device;
  double at;
  bool is_reached = false;
  int waits = 0;
};

StepTimes::MarkFactory FakeDevice::factory() {
  return [this] {
    auto m = std::make_unique<FakeMark>(*this);
    marks.push_back(m.get());
    return m;
  };
}

void FakeDevice::reach_all() {
  for (auto* m : marks) m->is_reached = true;
}

void mark_a_step(StepTimes& t, std::int64_t step = 1) {
  t.start_step(step);
  for (auto m : {Moment::kForwardEnd, Moment::kFirstLaunch, Moment::kLastReady,
                 Moment::kWaitStart, Moment::kEnd}) {
    t.mark(m);
  }
  t.end_step();
}

TEST(StepTimes, DeviceTimesAreReadOnceTheDeviceHasPassedTheStep) {
  FakeDevice device;
  StepTimes times(device.factory());
  mark_a_step(times);
  EXPECT_TRUE(times.take(/*wait=*/false).empty());  // the device is behind: nothing read
  for (auto* m : device.marks) EXPECT_EQ(m->waits, 0);
  device.marks.back()->is_reached = true;  // the step's end: the device passed the step
  auto read = times.take(false);
  ASSERT_EQ(read.size(), 1u);
  EXPECT_DOUBLE_EQ(read[0].forward_ms, 10);           // marks at 0 and 10
  EXPECT_DOUBLE_EQ(read[0].backward_compute_ms, 20);  // 10 to 30
  EXPECT_DOUBLE_EQ(read[0].backward_comm_ms, 30);     // 20 to 50
  EXPECT_DOUBLE_EQ(read[0].exposed_comm_ms, 10);      // the later of 30 and 40, to 50
  EXPECT_DOUBLE_EQ(read[0].overlap_ms, 10);           // 20 to 30
}

TEST(StepTimes, AskingWaitsForTheStepsNotReadYet) {
  FakeDevice device;
  StepTimes times(device.factory());
  mark_a_step(times, 1);
  mark_a_step(times, 2);
  EXPECT_TRUE(times.take(false).empty());
  auto read = times.take(/*wait=*/true);
  ASSERT_EQ(read.size(), 2u);
  EXPECT_GT(device.marks.back()->waits, 0);
  EXPECT_TRUE(times.take(true).empty());  // each step is read once
}

TEST(StepTimes, WithoutMarksTheHostClockTimesTheStep) {
  StepTimes times(at::Device(at::kCPU));
  mark_a_step(times);
  auto read = times.take(false);  // the CPU: readable at once
  ASSERT_EQ(read.size(), 1u);
  EXPECT_GE(read[0].forward_ms, 0);
  EXPECT_GE(read[0].backward_comm_ms, read[0].exposed_comm_ms);
}

// PyTorch's rule (its Reducer's should_collect_runtime_stats): steps 1 to 10, then every 100th.
// An unsampled step places no mark on the device and is not read.
TEST(StepTimes, OnlySampledStepsAreMarkedAndTimed) {
  FakeDevice device;
  StepTimes times(device.factory());
  std::vector<std::int64_t> timed;
  for (std::int64_t step = 1; step <= 250; ++step) {
    const int ticks = device.ticks;
    mark_a_step(times, step);
    const bool marked = device.ticks > ticks;
    device.reach_all();
    const bool read = !times.take(/*wait=*/false).empty();
    EXPECT_EQ(marked, read) << "step " << step;
    if (read) timed.push_back(step);
  }
  const std::vector<std::int64_t> expected = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100, 200};
  EXPECT_EQ(timed, expected);
}

// A step's marks are recorded again at a later sampled step once read; new ones are made only
// while the device is behind (here: steps 1 and 2 both unread).
TEST(StepTimes, MarksAreReusedOnceRead) {
  FakeDevice device;
  StepTimes times(device.factory());
  mark_a_step(times, 1);
  mark_a_step(times, 2);
  EXPECT_EQ(device.marks.size(), 12u);
  device.reach_all();
  EXPECT_EQ(times.take(false).size(), 2u);
  int read = 0;
  for (std::int64_t step = 3; step <= 300; ++step) {
    mark_a_step(times, step);
    device.reach_all();
    for (const auto& d : times.take(false)) {
      ++read;
      EXPECT_DOUBLE_EQ(d.forward_ms, 10) << "step " << step;  // times of the new recording
    }
  }
  EXPECT_EQ(read, 11);  // 3 to 10, 100, 200, 300
  EXPECT_EQ(device.marks.size(), 12u);
  EXPECT_EQ(device.recorded, 11 * 6);
  times.start_step(301);  // sampled? no: its forward marks nothing
  times.start_step(400);  // a forward without a backward, then another: the mark is reused
  times.start_step(500);
  EXPECT_EQ(device.marks.size(), 12u);
  EXPECT_EQ(device.recorded, 11 * 6 + 2);
}

}  // namespace
}  // namespace dpx::detail
