// DDP's step times (Note [Step times]) from device marks, read once the device has passed them
// and never by making a step wait; host clock readings where there are no marks (the CPU).
// Fake marks stand for CUDA events here: each knows its device time and whether it is reached.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ddp/step_times.h"

namespace dpx::detail {
namespace {

struct FakeMark : StreamMark {
  explicit FakeMark(double at_ms) : at(at_ms) {}
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
  double at;
  bool is_reached = false;
  int waits = 0;
};

// Marks at device times 0, 10, 20, ... ms, in the order they are made; all kept for the test.
struct FakeDevice {
  std::vector<FakeMark*> marks;
  StepTimes::MarkFactory factory() {
    return [this] {
      auto m = std::make_unique<FakeMark>(10.0 * static_cast<double>(marks.size()));
      marks.push_back(m.get());
      return m;
    };
  }
};

void mark_a_step(StepTimes& t) {
  for (auto m : {Moment::kForwardStart, Moment::kForwardEnd, Moment::kFirstLaunch,
                 Moment::kLastReady, Moment::kWaitStart, Moment::kEnd}) {
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
  mark_a_step(times);
  mark_a_step(times);
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

}  // namespace
}  // namespace dpx::detail
