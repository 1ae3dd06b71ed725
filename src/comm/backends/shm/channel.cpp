#include "comm/backends/shm/channel.h"

namespace dpx::detail::shm {
// pack() keeps kind, dtype and reduce op in a byte each.
static_assert(static_cast<int>(at::ScalarType::NumOptions) < 128);
Channel::Channel(Segment& segment, Waiter& waiter, int rank, std::string where)
    : segment_(segment), waiter_(waiter), rank_(rank), where_(std::move(where)) {}

void Channel::begin(const CollectiveDescriptor& desc, Clock::duration timeout) {
  desc_ = desc;
  desc_.seq = seq_++;
    segment_.control(rank_).desc[desc_.seq % 2] = pack(desc_);
  checked_ = false;
  deadline_ = Deadline(timeout);
}

void Channel::sync() {
  ++step_;
  waiter_.post(step_);
  const char* op = to_string(desc_.kind);
  for (int q = 0; q < world(); ++q) {
    if (q != rank_) waiter_.wait(q, step_, deadline_, op);
  }
  waiter_.check_abort(op);
  if (!checked_) {
    checked_ = true;
    check_descriptors();
  }
}

void Channel::check_descriptors() const {
  for (int q = 0; q < world(); ++q) {
    if (q != rank_) {
      check_same(desc_, unpack(segment_.control(q).desc[desc_.seq % 2]), q, where_, "shm");
    }
  }
}

}  // namespace dpx::detail::shm
