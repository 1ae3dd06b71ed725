// One collective of an mpi group on the MPI thread, and the Work its caller holds. Included only
// by the mpi backend's files, inside #if DPX_WITH_MPI.
//
// Note [MPI collective steps]
// Every rank must start a communicator's collectives in one order, and MPI itself neither
// checks that the ranks agree nor ever times out. So each collective goes through these steps
// on the MPI thread (Note [MPI thread] in runtime.h):
//  1. Taken in, in call order: if the group has failed, it fails at once with that error. Else
//     it gets the group's next number and, with more than one rank, starts the exchange of its
//     descriptor (Note [Consistency]) on the group's check communicator: with up to
//     kPointToPointCheck ranks, an MPI_Isend to every peer and an MPI_Irecv from every peer
//     (Note [Descriptors by point-to-point]), above that an MPI_Iallgather.
//  2. When every descriptor is in and it is this collective's turn on the data communicator
//     (the collectives before it started their data step, or were refused), it compares them:
//     every rank sees the same descriptors, so on a difference all raise MismatchError, none
//     moves data, and the turn passes (the group stays usable). Else it starts its data step
//     (MPI_Iallreduce, MPI_Ibcast, ...; a large all-reduce's rounds of point-to-point messages:
//     Note [Ring all-reduce] in ring.h), and the next collective's turn comes.
//  3. When MPI completes the data step: what follows it on this thread (avg's division), then
//     the Work completes.
// (Step 2 chooses a blocking data step when every rank can: Note [Blocking data step].)
// Two communicators, because the all-gathers of step 1 run ahead of the data steps (a bucket's
// check overlaps the previous bucket's data), and each communicator then still sees one order,
// the call order, on every rank.
// The group's timeout runs from the call: past it, the Work fails with TimeoutError naming the
// collective, the step it waited in and, where it can tell, the ranks it waited for
// (timeout.cpp), and the group fails too (MPI cannot cancel a collective, so what is queued
// behind it could never run): every collective queued or issued later fails at once with the
// same error. MPI keeps writing into the buffers of a collective it has started until its
// request completes, so the task keeps its tensors and lingers (polled every millisecond) until
// then, or until MPI_Finalize.
//
// Note [Blocking data step]
// OpenMPI 4.1's non-blocking collectives (libnbc) are slower than its blocking ones on one host,
// up to 2x (docs/performance.md, "The mpi backend against raw MPI"). So, where the program asks
// for it (DPX_MPI_BLOCKING=1), the data step blocks the MPI thread (MPI_Allreduce rather than
// MPI_Iallreduce) when every rank can afford it. Opt-in, because neither the group's timeout nor
// a wait's can end a blocking step: a rank frozen in it freezes its peers' MPI threads and the
// callers waiting inside it (Note [MPI thread], step 4), as MPI's own blocking calls do, and the
// process cannot finalise MPI at exit until the peer goes on or dies. The default keeps every
// step non-blocking and bounded by the timeouts (MpiFaults.RankStoppedInTheDataExchange...).
//  1. With its descriptor (step 1), each rank publishes whether it "may block": the program
//     asked for it, and the collective is the only task on its MPI thread with nothing queued
//     (Context::alone).
//  2. At its turn (step 2) every rank has the same bits, and the data step blocks only when all
//     are set and all ranks are on one host, else it is non-blocking: MPI forbids matching a
//     blocking collective with a non-blocking one, so all ranks must choose alike. One host:
//     across two hosts (network namespaces) over OpenMPI 4.1's TCP transport, the blocking
//     all-reduce took 4-24 ms a call where the polled non-blocking one took 0.15-12.5 ms
//     (docs/performance.md), so there the step stays non-blocking.
//  3. While a collective that published "may block" has not chosen, its rank makes no other
//     blocking MPI call: later collectives publish "may not" (they are not alone), and a
//     sub-group's MPI_Comm_create_group waits (Note [MPI sub-groups], step 4).
// No deadlock, across groups too: a rank blocks only in a collective C that every rank r of C
// took in while r's thread had nothing else in flight (so no earlier collective of C's group is
// ahead of C's turn on r), and from then until C chooses, r makes non-blocking calls only (3).
// C's all-gather and turn thus wait on nothing but C's ranks taking C in, and every rank of C
// reaches C's blocking call. Two groups used in opposite orders on two ranks: on each rank the
// second one taken in is not alone, so neither blocks while the other waits for it
// (MpiBlocking.TwoGroupsInOppositeOrders; with every step blocking, that test deadlocks).
// What it costs:
//  - While a collective blocks, the thread polls nothing else (on one host, concurrency among
//    collectives buys nothing; the callers' threads keep computing, so DDP's buckets still
//    overlap backward).
//  - The group's timeout cannot end a blocking data step. Every rank reaches it at once (all
//    took it in while idle); a rank that dies in it ends the job (mpirun), and a rank frozen in
//    it (SIGSTOP) holds its peers until it resumes: their callers' waits time out, except that
//    of a caller making the step itself (Note [MPI thread], step 4), which returns with it. One
//    race is left: a rank whose all-gather misses the group's timeout by a hair fails the
//    collective while a peer, whose all-gather completed, blocks in the data step for good.
//  - A member whose collective may still block starts a sub-group's handshake only once it
//    has chosen (3). A rank that issues a collective and then makes a sub-group, where another
//    member of both makes the sub-group first and issues that collective after, therefore
//    waits for the collective past the sub-group's timeout: both end in TimeoutError (the
//    non-blocking step let that order through). Make sub-groups at the same point relative to
//    other groups' collectives on every member.
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/backends/mpi/runtime.h"
#include "comm/backends/mpi/tags.h"
#include "comm/coordination/consistency.h"
#include "dpx/comm/work.h"

namespace dpx::detail::mpi {

// Note [Descriptors by point-to-point]
// Every collective first exchanges its descriptor with every peer (Note [MPI collective steps],
// step 1), so that exchange's cost is paid by every call and is most of the backend's fixed cost
// per call. OpenMPI's MPI_Iallgather (libnbc) builds a schedule and runs it round by round; for
// a few ranks the same exchange by hand, a send to and a receive from each peer posted together,
// saves that machinery (measured: docs/performance.md, "The mpi backend's fixed cost, its large
// all-reduce, ..."). The check communicator carries nothing else, and each message's tag is the
// collective's number modulo 32768: MPI delivers messages of one sender, tag and communicator
// in the order they were sent, and every rank posts its exchanges in call order, so collective
// k's receive gets the peer's collective k even where the MPI thread and a helping waiter
// posted them (Note [MPI thread], step 4). With more ranks each rank's sends grow with the
// group, where a library's all-gather may use fewer rounds of larger messages: there the
// MPI_Iallgather stays.
constexpr int kPointToPointCheck = 8;

// Note [Waiting as long as it takes]
// A caller waiting for its collective makes the MPI calls itself (Note [MPI thread], step 4) for
// 50 us, then sleeps until the MPI thread completes it. A collective that takes a little longer
// (an all-reduce of 256 KiB: 53 us here) then pays for the hand-over and the wake-up, 1.15-1.22x
// raw MPI's time. Spinning 1 ms for every collective fixed that but cost DDP on a loaded
// machine (a waiter burning a core others want through a long bucket). So the spin is sized
// by what the group last saw: a collective of the same kind and size class (powers of two of
// its bytes) that took at most kLongestSpin (250 us) is waited for, in the caller's hands,
// until a quarter past that time from its call; longer or unknown ones get 50 us, as before.
// Measured (docs/performance.md, "The waiter's spin sized by what the group saw"): all-reduce
// of 256 KiB-2 MiB 0.98-1.03x raw MPI's time against 1.07-1.22x; DDP within noise (the MLP
// 0.97x under a CPU hog).
constexpr std::size_t kSizeClasses = 8 * 64;  // CollectiveKind (1-5) x bit width of the bytes
std::size_t size_class(const CollectiveDescriptor& desc);

// A group's state shared by its collectives.
struct Channel {
  int rank = 0;
  int size = 1;
  std::string where;
  std::chrono::milliseconds timeout{0};
  Runtime* runtime = nullptr;
  bool may_block = false;  // DPX_MPI_BLOCKING=1 (Note [Blocking data step])
  bool ring = true;        // not DPX_MPI_RING=0 (Note [Ring all-reduce] in ring.h)
  // MPI thread only (or a waiter helping it: Note [MPI thread], step 4).
  MPI_Comm data = MPI_COMM_NULL;   // the collectives' data
  MPI_Comm check = MPI_COMM_NULL;  // their descriptors (step 1)
  std::uint32_t taken = 0;         // collectives taken in so far (the next one's number)
  std::uint32_t settled = 0;       // of those, the ones that have their answer (CloseTask)
  std::uint32_t turn = 0;          // the number of the collective whose data step goes next
  std::uint32_t epoch = 0;         // agreed at set-up (Note [Group epochs] in tags.h)
  // Any thread: how long the last collective of each kind and size class took from call to
  // completion, in microseconds, 0 before the first (Note [Waiting as long as it takes]).
  mutable std::array<std::atomic<std::uint32_t>, kSizeClasses> took_us{};
  // Any thread: the error the group failed with (its first timeout), under `mutex`.
  std::mutex mutex;
  std::exception_ptr failed;
  std::exception_ptr failure();
};

// Starts a collective's data step (returns MPI's error code): non-blocking into `request`, or,
// when `request` is null, blocking until it is done (Note [Blocking data step]).
struct DataStep {
  std::function<int(MPI_Comm comm, MPI_Request* request)> start;
  // Optional: a data step of `rounds` rounds of point-to-point requests, run instead of a
  // non-blocking `start` (Note [Ring all-reduce] in ring.h). Round k (0, 1, ...) starts once the
  // requests of round k - 1 completed, into requests[0] and [1]; `tag` is the round's own.
  std::function<int(MPI_Comm comm, int k, int tag, MPI_Request* requests)> round;
  int rounds = 0;
  // Optional, with `round`: the rank round k receives from and the one it sends to (-1: none),
  // named when the group's timeout ends the round (Collective::unfinished_round).
  std::function<std::pair<int, int>(int k)> peers;
  std::function<void()> finish;  // optional: what follows the data step
};

// What each rank publishes in step 1.
struct Published {
  CollectiveDescriptor call;
  std::int64_t may_block = 0;  // Note [Blocking data step], step 1
  std::int64_t ring = 0;       // it has DataStep::round (a ring, a pair, shared memory's rounds)
  std::uint64_t host = 0;      // Runtime::host()
};

class MpiWork : public Work {
 public:
  MpiWork(std::shared_ptr<const Channel> channel, const CollectiveDescriptor& desc);

  void wait(std::chrono::milliseconds timeout) override;
  using Work::wait;
  bool is_completed() override { return done_.load(std::memory_order_acquire); }
  std::exception_ptr exception() override;
  std::chrono::steady_clock::time_point finished_at() override;

  // MPI thread.
  void number(std::uint32_t seq);
  void complete(std::exception_ptr error);
  // "allreduce(sum) on 10 Float as collective #3" (no number before step 1).
  std::string describe();

 private:
  std::shared_ptr<const Channel> channel_;
  CollectiveDescriptor desc_;
  std::size_t size_class_;  // size_class(desc_), into Channel::took_us
  bool numbered_ = false;
  std::atomic<bool> done_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point issued_at_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point finished_at_;
};

class Collective : public Task {
 public:
  Collective(std::shared_ptr<Channel> channel, const CollectiveDescriptor& desc, DataStep step,
             std::shared_ptr<MpiWork> work);
  State poll(Context& context) override;

 private:
  enum class Step { kNew, kCheck, kTurn, kData, kLinger };
  State advance(Context& context);
  State take_in(Context& context);
  State start_round();
  State finish_data_step();
  bool pending() const;  // MPI may still write into the collective's buffers
  State fail(std::exception_ptr error);
  State time_out(const std::string& waiting_for);
  bool due();            // time to look at the clock (every 32nd poll)
  bool past_deadline();  // due() and deadline_ passed
  int start_check();
  std::exception_ptr compare();
  // For time_out (timeout.cpp): step 1's peers whose descriptor has not come; the data step's
  // round and the peers it waits for.
  std::string unheard_peers() const;
  std::string unfinished_round() const;
  std::exception_ptr mpi_error(int rc, const char* call);
  std::exception_ptr round_error(std::exception_ptr thrown);

  std::shared_ptr<Channel> ch_;
  Published mine_;
  DataStep step_;
  std::shared_ptr<MpiWork> work_;
  std::chrono::steady_clock::time_point deadline_;
  Step at_ = Step::kNew;
  // The data step's, or a round's two (DataStep::round).
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  // Step 1's: the all-gather's one, or a send to and a receive from each peer.
  std::vector<MPI_Request> checks_;
  bool by_rounds_ = false;  // every rank runs DataStep::round (Note [Ring all-reduce])
  int round_ = 0;           // the round in flight
  std::vector<Published> all_;  // every rank's (step 1)
  bool undecided_ = false;      // counted in Context::undecided
  bool numbered_ = false;       // taken in: it counts in Channel::taken, and once done, settled
  std::uint32_t polls_ = 0;     // past_deadline()'s count
};

}  // namespace dpx::detail::mpi
