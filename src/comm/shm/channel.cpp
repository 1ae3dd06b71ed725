#include "comm/shm/channel.h"

#include <c10/core/ScalarType.h>

#include "dpx/comm/errors.h"
#include "dpx/comm/types.h"

namespace dpx::detail::shm {
namespace {

std::string describe(const OpDescriptor& d) {
  const auto kind = static_cast<OpKind>(d.kind);
  std::string s = to_string(kind);
  if (kind == OpKind::kAllreduce || kind == OpKind::kReduceScatter) {
    s += std::string("(") + dpx::to_string(static_cast<ReduceOp>(d.reduce_op)) + ")";
  } else if (kind == OpKind::kBroadcast) {
    s += "(root " + std::to_string(d.root) + ")";
  }
  if (kind != OpKind::kBarrier) {
    s += std::string(" on ") + std::to_string(d.numel) + " " +
         c10::toString(static_cast<at::ScalarType>(d.dtype));
  }
  return s + " as collective #" + std::to_string(d.seq);
}

bool same(const OpDescriptor& a, const OpDescriptor& b) {
  return a.seq == b.seq && a.kind == b.kind && a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.root == b.root && a.numel == b.numel;
}

}  // namespace

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllgather: return "allgather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kBarrier: return "barrier";
  }
  return "?";
}

Channel::Channel(Segment& segment, Waiter& waiter, int rank, std::string where)
    : segment_(segment), waiter_(waiter), rank_(rank), where_(std::move(where)) {}

void Channel::begin(const OpDescriptor& desc, Clock::time_point deadline) {
  desc_ = desc;
  desc_.seq = seq_++;
  segment_.control(rank_).desc[desc_.seq % 2] = desc_;
  checked_ = false;
  deadline_ = deadline;
}

void Channel::sync() {
  ++step_;
  waiter_.post(step_);
  const char* op = to_string(static_cast<OpKind>(desc_.kind));
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
    const OpDescriptor& theirs = segment_.control(q).desc[desc_.seq % 2];
    if (q == rank_ || same(theirs, desc_)) continue;
    throw MismatchError(where_ + "shm: ranks disagree on the collective: this rank called " +
                        describe(desc_) + ", rank " + std::to_string(q) + " called " +
                        describe(theirs) + ". Every rank must issue the same collectives in "
                        "the same order, with the same dtype, size, op and root.");
  }
}

}  // namespace dpx::detail::shm
