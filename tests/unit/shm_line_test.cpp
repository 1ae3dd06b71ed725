// The packed descriptor and its digest (Note [Control line layout] in comm/backends/shm/segment.h)
// keep every field the mismatch check compares.
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

TEST(ShmLineDescriptor, DigestChangesWithEveryComparedField) {
  CollectiveDescriptor d;
  d.seq = 7;
  d.kind = CollectiveKind::kAllreduce;
  d.dtype = static_cast<std::int16_t>(at::ScalarType::Float);
  d.numel = 4;
  const std::uint64_t base = digest(pack(d));
  EXPECT_EQ(digest(pack(d)), base);
  auto differs = [&](CollectiveDescriptor e, const char* field) {
    EXPECT_NE(digest(pack(e)), base) << field;
    EXPECT_THROW(check_same(d, unpack(pack(e)), 1, "", "shm"), MismatchError) << field;
  };
  CollectiveDescriptor e = d;
  e.seq = 9;  // the same parity
  differs(e, "seq");
  e = d, e.kind = CollectiveKind::kBroadcast, differs(e, "kind");
  e = d, e.dtype = static_cast<std::int16_t>(at::ScalarType::Int), differs(e, "dtype");
  e = d, e.reduce_op = 3, differs(e, "reduce_op");
  e = d, e.shared = 1, differs(e, "shared");
  e = d, e.root = 1, differs(e, "root");
  e = d, e.numel = 5, differs(e, "numel");
  e = d, e.numel = 4 + (std::int64_t{1} << 32), differs(e, "numel's high word");
}

}  // namespace
}  // namespace dpx::detail::shm
