// One rank's view of the group while it runs a collective: its data slot, its peers' slots and
// the round/step bookkeeping that makes reusing them safe.
//
// Note [Rounds and steps]
// A collective is a sequence of rounds; a round is "write my slot, post, wait for every peer's
// post, read peers' slots" (allreduce's large path posts twice per round). Every rank posts the
// same number of steps per round, so step numbers agree across ranks. Round k uses slot buffer
// k % 2. Before writing buffer k % 2 again in round k + 2, a rank must know that every peer has
// finished reading round k: it does, because in round k + 1 it waited for every peer's first
// post, which a peer makes only after finishing round k.
//
// Note [Mismatch check]
// The shm side of Note [Consistency] (comm/coordination/consistency.h). Before its first post of a
// collective, a rank writes its CollectiveDescriptor and the descriptor's 64-bit digest; after
// the first wait it compares every peer's digest with its own, before reading any peer data, and
// only when they differ reads the peer's full descriptor to name both calls (the digest sits in
// the control line the post already brought, the descriptor on the next line:
// Note [Control line layout] in segment.h). Each rank only ever writes inside its own slot,
// sized by its own arguments, so ranks that disagree never corrupt memory: they all see the
// mismatch after exactly one post, raise, and stay aligned for the next collective. Descriptors
// and digests alternate by collective parity, for the same reason as the data buffers.
#pragma once

#include <cstdint>
#include <string>

#include "comm/backends/shm/segment.h"
#include "comm/backends/shm/wait.h"

namespace dpx::detail::shm {

class Channel {
 public:
  Channel(Segment& segment, Waiter& waiter, int rank, std::string where);

  // Starts a collective: publishes its descriptor; its waits end `timeout` after they first
  // had to (Deadline).
  void begin(const CollectiveDescriptor& desc, Clock::duration timeout);
  // Posts the next step and waits for every peer to post it (checks descriptors the first time).
  void sync();
  // Ends the round: the next one writes the other buffer.
  void next_round() { ++round_; }

  char* mine() const { return segment_.slot(rank_, round_); }
  const char* slot(int rank) const { return segment_.slot(rank, round_); }
  // This round's few bytes in the rank's control line (Note [Inline data] in segment.h).
  unsigned char* mine_inline() const { return segment_.control(rank_).inline_data[round_ % 2]; }
  const unsigned char* inline_slot(int rank) const {
    return segment_.control(rank).inline_data[round_ % 2];
  }
  std::size_t slot_bytes() const { return segment_.slot_bytes(); }
  int rank() const { return rank_; }
  int world() const { return segment_.world(); }

 private:
  void check_descriptors() const;

  Segment& segment_;
  Waiter& waiter_;
  int rank_;
  std::string where_;
  std::uint32_t step_ = 0;
  std::uint64_t round_ = 0;
  std::uint32_t seq_ = 0;  // collectives begun on this group
  CollectiveDescriptor desc_;
  std::uint64_t digest_ = 0;  // of desc_
  bool checked_ = true;
  Deadline deadline_;
};

}  // namespace dpx::detail::shm
