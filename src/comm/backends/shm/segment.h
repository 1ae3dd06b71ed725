// The shared-memory segment of one shm group: a header, one control block per rank and two
// data slots per rank (double-buffered, so a fast rank can start the next round while a slow
// one still reads the last). DDP's shared buckets (Note [Shared buckets] in
// comm/shared_memory.h) are a segment of their own with one slot per rank.
//
// Setup (Segment::open, collective over the group's store):
//   1. Each rank takes its next round g of "shm" (Note [Store rounds] in store/round.h), so
//      that several groups made on one store use different keys.
//   2. Rank 0 creates an anonymous memory file (memfd_create), sizes it, reserves its memory
//      (posix_fallocate), maps it, writes the header and sets "shm/<g>/name" to
//      "/proc/<pid>/fd/<fd>" (or to "error:<message>" when any of that failed, so that every
//      rank fails at once with rank 0's reason).
//      Before it, "shm/<g>/pid_ns" names rank 0's pid namespace.
//   3. The other ranks open that path, map it, check the header and set "shm/<g>/mapped/<rank>"
//      to "1", or to "error:<why>" when they cannot (Note [Attach failures]).
//   4. Rank 0 waits for every "mapped" key, closes its descriptor and sets "shm/<g>/ready" to
//      "1", or to the first "error:<why>" it read; the others wait for "ready".
// Note [Attach failures]
// A rank that cannot use rank 0's memory file (another user, another pid namespace, a seccomp
// policy) used to fail alone, while rank 0 waited out the group timeout for its "mapped" key. It
// now says why in that key, so every rank raises the same DistributedError at once ("rank R
// cannot open rank 0's segment: ..."), and rank 0 keeps the store up until the others have read
// it (Note [Failing together] in store/round.h). A rank in another pid namespace is told so by
// the namespaces, not by a missing /proc entry, which used to read as "rank 0 exited during
// set-up" while rank 0 was alive.
// Note [No name]
// The segment never has a name in /dev/shm, so no crash at any step (SIGKILL of rank 0 inside the
// set-up window included) can leave one behind: the memory goes with the last descriptor or
// mapping. Nor does /dev/shm's size (64 MiB in a default Docker container) limit the group: a memfd
// is charged to the process's memory like any page it touches. Opening another process's descriptor
// through /proc needs the same user and pid namespace, which ranks that share a host and a boot id
// (how `auto` picks shm) normally have.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/coordination/consistency.h"
#include "dpx/store/store.h"

namespace dpx::detail::shm {

// Note [Inline data]
// A small collective's data rides in its rank's control line when it fits (kInlineBytes: four
// float32, two float64 or int64; a loss and a count, GradScaler's found-inf): a peer that sees the
// post has the data too and reads no data slot, one transfer between cores instead of two (and the
// slot's line need not come back for the next write). Like the slots, it is kept by round parity
// (Note [Rounds and steps] in channel.h); whether a collective uses it depends only on what the
// descriptors compare (dtype and numel), so every rank chooses alike and a mismatch is caught
// before anything is read. The rank's own part is read from its tensor, not from its line
// (Note [Own data] in algorithms.cpp).
//
// Note [Control line layout]
// The 64-byte line every peer reads on every post: the step (4 bytes) and the sleepers count (4), a
// 64-bit digest of the collective's descriptor per collective parity (16 bytes;
// Note [Mismatch check] in channel.h), the inline data per round parity (2 x 16), 8 unused. The
// full descriptors, which only the error message needs, live on the rank's second line beside its
// pid, a line peers read only when a digest differs or a peer may be dead, so writing them per call
// stays in this core's cache. Before this the line held the descriptors themselves (2 x 20 bytes,
// LineDescriptor) and 8 bytes of data per parity: 16 B all-reduces took a data slot, 1.19x the 8 B
// time (docs/performance.md, issue #47). Why 16 and not the 20 that fit: the second parity's data
// would start 4 bytes off an 8-byte boundary, and reduce() reads float64 and int64 in place; 24
// would need a 32-bit digest.
constexpr std::size_t kInlineBytes = 16;

// A CollectiveDescriptor as the second control line keeps it: the same fields in 20 bytes (the
// small ones in a byte each; numel in two words, so that the struct needs only 4-byte alignment).
struct LineDescriptor {
  std::uint32_t seq;
  std::int8_t kind, dtype, reduce_op, shared;
  std::int32_t root;
  std::uint32_t numel_low, numel_high;
};
static_assert(sizeof(LineDescriptor) == 20);

inline LineDescriptor pack(const CollectiveDescriptor& d) {
  const auto numel = static_cast<std::uint64_t>(d.numel);
  return {d.seq, static_cast<std::int8_t>(d.kind), static_cast<std::int8_t>(d.dtype),
          static_cast<std::int8_t>(d.reduce_op), static_cast<std::int8_t>(d.shared), d.root,
          static_cast<std::uint32_t>(numel), static_cast<std::uint32_t>(numel >> 32)};
}

inline CollectiveDescriptor unpack(const LineDescriptor& l) {
  CollectiveDescriptor d;
  d.seq = l.seq;
  d.kind = static_cast<CollectiveKind>(l.kind);
  d.dtype = l.dtype;
  d.reduce_op = l.reduce_op;
  d.shared = l.shared;
  d.root = l.root;
  d.numel = static_cast<std::int64_t>((static_cast<std::uint64_t>(l.numel_high) << 32) | l.numel_low);
  return d;
}

// Every field the mismatch check compares, in 64 bits (Note [Control line layout]): the small
// fields side by side, root and numel each times an odd constant (a bijection), so calls that
// differ in one field always differ here; calls that differ in several collide only where the
// products' differences cancel modulo 2^64 (e.g. numels 2^32 apart with other fields changed too),
// which no call a program makes is near, but is not ruled out. Three independent
// multiplies: a hash with a finaliser per word cost the call about 0.01 us (docs/performance.md).
inline std::uint64_t digest(const LineDescriptor& l) {
  auto byte = [](std::int8_t v, int at) {
    return static_cast<std::uint64_t>(static_cast<std::uint8_t>(v)) << at;
  };
  const std::uint64_t small =
      l.seq | byte(l.kind, 32) | byte(l.dtype, 40) | byte(l.reduce_op, 48) | byte(l.shared, 56);
  const std::uint64_t root = static_cast<std::uint32_t>(l.root);
  const std::uint64_t numel = static_cast<std::uint64_t>(l.numel_high) << 32 | l.numel_low;
  return small * 0x9e3779b97f4a7c15ULL + root * 0xbf58476d1ce4e5b9ULL +
         numel * 0x94d049bb133111ebULL;
}

// One per rank. `step` is the futex word peers wait on. The descriptors' digests share its cache
// line: a peer that sees the new step has that line already, so the mismatch check costs no extra
// transfer between cores; so does small data (Note [Control line layout]).
struct alignas(64) RankControl {
  std::atomic<std::uint32_t> step;
  std::atomic<std::uint32_t> sleepers;  // peers blocked in FUTEX_WAIT on `step`
  std::uint64_t digest[2];              // by collective parity (Note [Mismatch check])
  alignas(8) unsigned char inline_data[2][kInlineBytes];  // by round parity (Note [Inline data])
  alignas(64) std::atomic<std::int32_t> pid;
  LineDescriptor desc[2];  // by collective parity; read when the digests differ
};
static_assert(offsetof(RankControl, inline_data) + sizeof(RankControl::inline_data) <= 64,
              "the step, the digests and the inline data share one cache line");
static_assert(offsetof(RankControl, inline_data) % 8 == 0 && kInlineBytes % 8 == 0,
              "reduce() reads inline float64 and int64 in place");
static_assert(offsetof(RankControl, pid) == 64);
static_assert(sizeof(RankControl) == 128);

// Why a rank aborted the group; peers rethrow the same type.
enum class AbortKind : std::uint32_t { kNone = 0, kPeerLost = 1, kTimeout = 2, kOther = 3 };

struct alignas(64) Header {
  std::uint64_t magic;
  std::uint32_t world;
  std::uint32_t version;
  std::uint64_t slot_bytes;
  std::uint64_t total_bytes;
  alignas(64) std::atomic<std::uint32_t> abort_rank;  // 0, else 1 + the rank that aborted
  std::atomic<std::uint32_t> abort_kind;
  char abort_message[1024];
};

struct SegmentOptions {
  std::size_t slot_bytes = 1 << 20;  // one data slot
  int slots_per_rank = 2;            // a group's channel double-buffers; shared buckets need one
  std::string round = "shm";         // the store round its set-up takes (Note [Store rounds])
  // What the memory is for and how to need less of it, for the error when it cannot be reserved.
  std::string purpose = "The group needs 2 x DPX_SHM_SLOT_BYTES x world plus a page or two; "
                        "free memory or raise the memory limit, lower DPX_SHM_SLOT_BYTES, or use "
                        "DPX_BACKEND=gloo.";
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

class Segment {
 public:
  // Collective: every rank of the group calls it with the same options.
  static std::unique_ptr<Segment> open(Store& store, int rank, int world,
                                       const SegmentOptions& options, const std::string& where);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  Header& header() const { return *reinterpret_cast<Header*>(base_); }
  RankControl& control(int rank) const {
    return reinterpret_cast<RankControl*>(base_ + sizeof(Header))[rank];
  }
  char* slot(int rank, std::uint64_t round) const {
    return base_ + data_offset_ +
           (slots_ * static_cast<std::size_t>(rank) + round % slots_) * slot_bytes_;
  }
  std::size_t slot_bytes() const { return slot_bytes_; }
  int world() const { return world_; }
  // "/proc/<rank 0 pid>/fd/<fd>": where peers opened it during set-up (gone since).
  const std::string& name() const { return name_; }

 private:
  Segment(std::string name, char* base, std::size_t bytes, int world, std::size_t slot_bytes,
          int slots);
  static std::unique_ptr<Segment> open_as_creator(Store& store, const std::string& prefix,
                                                  std::size_t bytes, int world, std::size_t slot,
                                                  const SegmentOptions& options,
                                                  const std::string& where);

  std::string name_;
  char* base_;
  std::size_t bytes_;
  int world_;
  std::size_t slot_bytes_;
  std::size_t slots_;
  std::size_t data_offset_;
};

}  // namespace dpx::detail::shm
