// The tags of an mpi group's messages: its descriptors' and its collectives' rounds'. No MPI
// header here: the unit tests check them for every MPI_TAG_UB (tests/unit/mpi_tags_test.cpp).
#pragma once

#include <cstdint>

namespace dpx::detail::mpi {

// Collectives of rounds (DataStep::round) whose tags are kept apart: each owns
// round_stride(MPI_TAG_UB) tags, so its rounds must not outnumber them (Note [Ring all-reduce] in
// ring.h).
constexpr int kRoundCollectives = 1024;

// Note [Group epochs]
// MPI may give a new communicator the context id of one freed before, and a message sent on the
// freed one that no receive took (a peer's descriptor for a collective this rank never issued,
// a ring round a peer sent after this rank gave up on the collective) then matches a receive of
// the new one with the same tag. Collective numbers start at 0 in every group, so the tags
// would match: MPICH 4.0 reuses ids at once, and its run of the fault tests got a descriptor of
// the previous test's group as a new group's first (a MismatchError where none was, or a ring
// taking a stale round's bytes). So the members of a group agree on its epoch when it is made
// (SetupTask: the largest of each member's count of groups it made so far, plus one; every
// member's count then moves past it), and every tag carries it: descriptors' tags are the epoch
// modulo (MPI_TAG_UB + 1) / 32768 (65536 epochs under OpenMPI 4.1, 8192 under MPICH 4.0, 1 where
// MPI_TAG_UB is the least MPI allows), then the collective's number modulo 32768; a round's tag
// is the epoch modulo kRoundEpochs, the collective's number modulo kRoundCollectives, then the
// round. A stale message can then match only a group as many epochs later, and the group that
// left it was unusable anyway (docs/backends.md: end the job after a group fails).
constexpr int kRoundEpochs = 16;

// Tags each collective's rounds own (Note [Group epochs]): MPI_TAG_UB / (kRoundCollectives x the
// epochs kept apart), the epochs dropping to 1 where that would leave fewer than 64.
int round_stride(int tag_ub);
// The tag of a descriptor, and of round `round` of a collective (Note [Group epochs]).
int check_tag(std::uint32_t epoch, std::uint32_t seq, int tag_ub);
int round_tag(std::uint32_t epoch, std::uint32_t seq, int round, int tag_ub);

}  // namespace dpx::detail::mpi
