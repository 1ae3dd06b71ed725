#include "comm/backends/shm/channel.h"

#include <c10/util/Exception.h>

namespace dpx::detail::shm {
// pack() keeps kind, dtype and reduce op in a byte each.
static_assert(static_cast<int>(at::ScalarType::NumOptions) < 128);
Channel::Channel(Segment& segment, Waiter& waiter, int rank, std::string where)
    : segment_(segment), waiter_(waiter), rank_(rank), where_(std::move(where)) {}

void Channel::begin(const CollectiveDescriptor& desc, Clock::duration timeout) {
  desc_ = desc;
  desc_.seq = seq_++;
  RankControl& mine = segment_.control(rank_);
  const LineDescriptor packed = pack(desc_);
  digest_ = digest(packed);
  mine.desc[desc_.seq % 2] = packed;
  mine.digest[desc_.seq % 2] = digest_;
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
  const int parity = desc_.seq % 2;
  for (int q = 0; q < world(); ++q) {
    const RankControl& c = segment_.control(q);
    if (q == rank_ || c.digest[parity] == digest_) continue;
    check_same(desc_, unpack(c.desc[parity]), q, where_, "shm");  // throws MismatchError
    TORCH_INTERNAL_ASSERT(false, "rank ", q, "'s descriptor digest differs from rank ", rank_,
                          "'s for the same call, ", to_string(desc_));
  }
}

}  // namespace dpx::detail::shm
