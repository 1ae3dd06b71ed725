// The communicator of an mpi sub-group, made by its members only. Included only by the mpi
// backend's files, inside #if DPX_WITH_MPI.
//
// Note [MPI sub-groups]
// MPI_Comm_create_group involves only the group's members (MPI_Comm_split and MPI_Comm_create
// would need every rank of MPI_COMM_WORLD), but it blocks, and on the MPI thread a member that
// never comes would block every group of the process for ever (Note [MPI thread] in runtime.h).
// So the members first agree, with non-blocking messages on MPI_COMM_WORLD, that they are all
// there, and only then make the communicator, which no longer waits on anyone:
//  1. Each member but the first (the leader) posts a receive for the leader's verdict and sends
//     it a join naming the member list (a hash of it) and how many groups of this list the
//     process made before, so that a message of an earlier, failed attempt is told apart.
//     A member starts this step only once no collective of its own may still choose to block
//     (Note [Blocking data step] in collective.h); until its communicator is made, none of its
//     collectives can (the handshake is in flight, so none is alone). So no member waits in
//     step 4 for one blocked in a data step, nor blocks there while a peer's step 4 waits for it.
//  2. The leader collects the joins. When all are in it sends "go" to every member, or
//     "mismatch" when one named another list. Past its timeout, or when a member withdraws
//     (step 3), it sends "gave up" to those that joined, cancels its receives and fails.
//  3. A member past its timeout sends a withdraw and waits kAnswerGrace more for the verdict
//     (a live leader answers a withdraw at once); without one it cancels its receive and fails.
//     A "go" that arrives in time is final: the leader is making the communicator.
//  4. After "go" (the leader: after sending it) each member calls MPI_Comm_create_group, with
//     the members in group-rank order (MPI_Group_incl), on the MPI thread.
// A process makes one sub-group at a time (a second caller waits), so no two of its creations
// block each other. Members make the groups they share in one order, as every rank issues a
// group's collectives in one order; otherwise they time out. After a set-up timeout the
// creations of the ranks are out of step (an unmatched join may be left): end the job.
// dpx reserves the tags kJoinTag, kVerdictTag and kCreateTag on MPI_COMM_WORLD (a program's
// own receive there with MPI_ANY_TAG could take its messages).
#pragma once

#include <mpi.h>

#include <chrono>
#include <string>
#include <vector>

#include "comm/backends/mpi/runtime.h"

namespace dpx::detail::mpi {

// How long a member that withdrew waits for the leader's verdict (step 3).
constexpr std::chrono::milliseconds kAnswerGrace{2000};

// Makes the communicator of `members` (ranks of MPI_COMM_WORLD, in group-rank order; this
// process is one of them) within `timeout` (+ kAnswerGrace), from the calling thread.
// Throws TimeoutError when a member does not come, MismatchError when members disagree on the
// list; `where` starts their messages.
MPI_Comm create_subgroup_comm(Runtime& runtime, const std::vector<int>& members,
                              std::chrono::milliseconds timeout, const std::string& where);

}  // namespace dpx::detail::mpi
