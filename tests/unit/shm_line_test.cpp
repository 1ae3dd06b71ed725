// The control line's packed descriptor (Note [Inline data] in comm/backends/shm/segment.h) keeps
// every field the mismatch check compares.
#include <gtest/gtest.h>

#include "comm/backends/shm/segment.h"

namespace dpx::detail::shm {
namespace {

TEST(ShmLineDescriptor, PackKeepsEveryComparedField) {
  CollectiveDescriptor d;
  d.seq = 0xfffffffe;
  d.kind = CollectiveKind::kReduceScatter;
  d.dtype = static_cast<std::int16_t>(at::ScalarType::BFloat16);
  d.reduce_op = 4;
  d.shared = 1;
  d.root = -7;
  for (std::int64_t numel : {std::int64_t{0}, std::int64_t{3}, (std::int64_t{1} << 40) + 5}) {
    d.numel = numel;
    const CollectiveDescriptor back = unpack(pack(d));
    EXPECT_EQ(to_string(back), to_string(d));
    EXPECT_NO_THROW(check_same(d, back, 1, "", "shm"));
  }
}

}  // namespace
}  // namespace dpx::detail::shm
