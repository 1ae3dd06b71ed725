// A group's set-up and close on the MPI thread: the tasks that make its communicators and free
// them. Included only by the mpi backend's files, inside #if DPX_WITH_MPI.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "comm/backends/mpi/runtime.h"
#include "dpx/comm/work.h"

namespace dpx::detail::mpi {

struct Channel;  // collective.h

// Note [Destroying a group]
// A group destroyed with collectives in flight (DDP dropped mid-step, a test that returns early)
// frees its communicators only once every collective it took in has its answer. Freeing them
// earlier, between two rounds of a ring, left the rounds a peer had already sent unmatched on
// this rank: OpenMPI keeps such messages for the communicator's context id, and hands them to
// the next communicator that takes the id (it crashed in mca_pml_ob1_add_comm making a
// sub-group, mpi.two_hosts; a receive with the same tag would have taken a stale message's
// bytes). In a program whose ranks issued the same collectives before their destructors, each
// of them, once its descriptors are in, runs on every rank, so letting them all finish leaves
// nothing unmatched; one that times out lingers, and MPI frees the communicator when its
// requests end. The destructor waits for that for at most 10 s (or the group's timeout if
// shorter), so the frees stay at one point of every rank's program when the collectives finish
// soon; past that it returns, and the communicators go when the last collective settles (a
// collective waiting for a peer that died or never issued it settles at the group's timeout,
// 30 minutes by default). Where the ranks' programs diverged, or the group failed on one rank
// only, a peer's descriptor can still be left unmatched: such a group is not usable anyway, and
// the job should end (docs/backends.md).
class CloseTask : public Task {
 public:
  CloseTask(std::shared_ptr<Channel> channel, std::shared_ptr<CompletionWork> work)
      : ch_(std::move(channel)), work_(std::move(work)) {}
  State poll(Context& context) override;

 private:
  std::shared_ptr<Channel> ch_;
  std::shared_ptr<CompletionWork> work_;
};

// Note [One creation at a time]
// OpenMPI 4.1 agrees on a new communicator's context id by rounds of non-blocking all-reduces
// on the parent, each taking the parent's next internal tag when it is issued, and a round
// issues the next when the last completes. With two MPI_Comm_idup of one parent in flight, the
// order in which their rounds take tags follows the order in which rounds complete, which can
// differ across ranks; that matters once the ranks' free ids differ (a communicator freed under
// a collective a peer never joined stays held on one rank only) and the agreement needs more
// rounds: rounds of the two creations can then pair across ranks (our reading of OpenMPI's
// comm_cid.c; the program below shows the hang, not the pairing), and one rank's creations
// finish while another's wait for ever (tests/scripts/mpi/idup_in_flight.c: with two in flight
// and the ranks' ids apart, 2 ranks hung in 5 runs of 5; one at a time, or with the ids alike,
// 300 rounds passed in 5 of 5). It showed as later groups of MPI_COMM_WORLD failing to form, now
// and then, after the fault tests.
// So a process has one MPI_Comm_idup in flight at a time: a SetupTask makes its communicators
// one after another, and starts only when no other SetupTask's is in flight (Context::creating).
// Every rank makes its groups in one order (from several threads only if they take turns in
// one order), so they stay paired. A sub-group's MPI_Comm_create_group (Note [MPI sub-groups]
// in subgroup.h) agrees on an id by messages among its members, not by the parent's
// all-reduces, and is not held to this turn. A creation whose caller timed out stays in flight
// (MPI cannot cancel it) and keeps the turn: later groups of the process fail at once saying
// so, where they would otherwise time out blaming their peers (end the job after a set-up
// timeout, as docs/backends.md says).

// A set-up step: duplicates `parent` into each of `outs`, one at a time, each returning MPI's
// errors rather than aborting, then agrees with the other members on the group's `epoch` over
// the last of them (Note [Group epochs] in tags.h), and completes `work` (CompletionWork), or
// lingers past `deadline` while MPI still owns a request. `target` owns what MPI writes into
// when they complete (the channel whose communicators these are): kept alive until then, even
// when the caller gave up on the group. `where` starts errors.
class SetupTask : public Task {
 public:
  SetupTask(MPI_Comm parent, std::vector<MPI_Comm*> outs, std::uint32_t* epoch,
            std::chrono::steady_clock::time_point deadline, std::shared_ptr<CompletionWork> work,
            std::shared_ptr<void> target, std::string where)
      : parent_(parent), outs_(std::move(outs)), epoch_(epoch), deadline_(deadline),
        work_(std::move(work)), target_(std::move(target)), where_(std::move(where)) {}
  State poll(Context& context) override;

 private:
  // Completes the caller's wait (once); `error` null for success.
  void answer(std::exception_ptr error);
  // Done with MPI: lets the next creation start.
  State finish(Context& context);

  MPI_Comm parent_;
  std::vector<MPI_Comm*> outs_;
  std::size_t next_ = 0;  // the next of outs_ to issue
  std::uint32_t* epoch_;   // into the target
  std::uint32_t proposed_ = 0;
  bool agreeing_ = false;  // the epoch's all-reduce was issued
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::chrono::steady_clock::time_point deadline_;
  std::shared_ptr<CompletionWork> work_;
  std::shared_ptr<void> target_;
  std::string where_;
  bool answered_ = false;
};

}  // namespace dpx::detail::mpi
