// The hierarchical backend: shm inside each host, gloo (or MPI) between one leader per host
// (Note [Hierarchical collectives]).
#include "comm/backends/hierarchical/process_group_hierarchical.h"

#include <c10/util/Exception.h>

#include <functional>

#include "comm/coordination/consistency.h"
#include "comm/coordination/issuer.h"
#include "comm/backends/gloo/process_group_gloo.h"
#include "comm/backends/mpi/process_group_mpi.h"
#include "comm/backends/shm/process_group_shm.h"
#include "dpx/errors.h"

namespace dpx::detail {
namespace {

// Note [Hierarchical collectives]
// A job on several hosts with several ranks on some host sends, over flat ring Gloo, every
// rank's share of each all-reduce across the network. This group sends only one leader's per
// host (local rank 0, the host's lowest rank):
//  1. inside each host, the ranks all-reduce over shm (sum for sum and avg);
//  2. the leaders all-reduce the host results over gloo (a group of one rank per host, whose
//     rank is the host's index: hosts are numbered by their lowest rank);
//  3. inside each host, the leader broadcasts the result over shm (for avg, the leader first
//     divides the sum by the world size).
// A broadcast runs the same way: inside the root's host from the root (unless the root leads
// it), between the leaders from the root's host, inside every host from its leader.
// A barrier takes the same three steps (do_barrier). All-gather and reduce-scatter go over a
// flat gloo group of every rank (in issue order with the others), made at its first use
// (Note [The flat group on first use]). Hosts with
// one rank have no shm group; a job on one host no leaders' group.
// "hierarchical-mpi" is the same with MPI in gloo's place: the leaders' group is made by the
// leaders alone (MPI_Comm_create_group: Note [MPI sub-groups] in comm/backends/mpi/subgroup.h),
// the flat one is all of MPI_COMM_WORLD, whose ranks must be the store's. The hosts are still
// what the store round says they are (Note [What a host is]), as for the shm groups. The steps of one collective
// run on the group's issuer thread, one collective after the other in issue order, so every
// sub-group sees its collectives in the same order on every rank.
//
// Errors keep their types and end every rank (Note [Hierarchical errors]).
//
// Note [Hierarchical errors]
// Ranks that disagree on a collective: step 1 finds a disagreement inside a host (every rank of
// that host raises MismatchError), step 2 one between hosts (every leader raises). The others
// must hear of it, or they would wait for the timeout:
//  - a leader whose host disagreed calls an all-gather instead of its step 2 (which is never
//    one), so the other leaders' check fails too;
//  - a leader whose step 2 failed that way calls an all-gather instead of step 3's broadcast
//    (no step inside a host is one: a barrier's step 1 is a barrier), so its host's ranks'
//    check fails too.
// Every rank then raises MismatchError and the sub-groups stay in step: the group stays usable.
// A broadcast whose ranks disagree only inside a host other than the root's is found in step 3
// by that host alone; the other hosts complete it.
// Any other error (a lost peer, a timeout) breaks the group on this rank: the leader aborts its
// host's shm group with the same error type, so that its ranks stop waiting in step 3, and drops
// its leaders' gloo group, whose closed connections end the other leaders' step 2 with
// PeerLostError (which they pass on to their hosts the same way). Every later collective fails
// at once with the first error. Over MPI nothing tells the other leaders: their step 2 ends
// with the group's timeout (TimeoutError), which they pass on the same way.
class HierarchicalGroup : public ProcessGroup {
 public:
  HierarchicalGroup(const BackendArgs& args, const HostLayout& layout, Backend between);
  ~HierarchicalGroup() override { issuer_.reset(); }  // before the groups its thread uses
  std::string backend() const override {
    return between_kind_ == Backend::kMpi ? "hierarchical-mpi" : "hierarchical";
  }

 protected:
  std::shared_ptr<Work> do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) override;
  std::shared_ptr<Work> do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) override;
  // Handed to the flat group on the issuer thread, after the collectives issued before them
  // finished, as on shm.
  std::shared_ptr<Work> do_allgather(at::Tensor& output, const at::Tensor& input) override {
    return issuer_->submit([this, output, input]() mutable {
      return flat().allgather(output, input);
    });
  }
  std::shared_ptr<Work> do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                          const ReduceScatterOptions& opts) override {
    return issuer_->submit([this, output, input, opts]() mutable {
      return flat().reduce_scatter(output, input, opts);
    });
  }
  std::shared_ptr<Work> do_barrier() override;

 private:
  using Step = std::function<std::shared_ptr<Work>()>;
  // One collective's steps on this rank; a null step is skipped.
  struct Steps {
    const char* op;
    Step inside;              // step 1
    Step between;             // step 2 (leaders)
    at::Tensor result;        // broadcast in step 3
    std::function<void()> finish;  // by the rank that makes the final result
  };

  // Issues `steps` on the issuer thread.
  std::shared_ptr<Work> issue(Steps steps);
  // Runs the steps (Note [Hierarchical collectives]), or fails at once if the group broke.
  void run(const Steps& s);
  void run_steps(const Steps& s);
  // Where a step found that ranks disagree: step 1, step 2, step 3.
  enum class Found { kInside, kBetween, kSpread };
  // The error of a step that disagreed, rethrown with what the sub-group's ranks mean.
  [[noreturn]] void rethrow_mismatch(std::exception_ptr e, const char* op, Found where) const;
  void break_group(std::exception_ptr error);
  // The flat group, made at its first use (Note [The flat group on first use]); issuer thread.
  ProcessGroup& flat();

  HostLayout layout_;
  Backend between_kind_;  // gloo or mpi
  int host_;
  std::shared_ptr<ShmGroup> inside_;       // this host's ranks; null when alone on the host
  std::shared_ptr<ProcessGroup> between_;  // the leaders; null unless leader of several hosts
  std::shared_ptr<ProcessGroup> flat_;     // every rank; null until first used over gloo
  BackendArgs flat_args_;
  std::exception_ptr broken_;              // issuer thread only
  std::unique_ptr<Issuer> issuer_;
};

// The call that matches no step of a hierarchical collective in `group` (leaders' or host's):
// an all-gather, which no step is (Note [Hierarchical errors]).
std::shared_ptr<Work> signal(ProcessGroup& group) {
  auto mine = at::zeros({1}, at::kLong);
  auto all = at::zeros({group.size()}, at::kLong);
  return group.allgather(all, mine);
}

BackendArgs sub_group(const BackendArgs& args, const std::string& prefix, int rank, int size) {
  BackendArgs sub = args;
  sub.store = Store::prefix(prefix, args.store);
  sub.rank = rank;
  sub.size = size;
  return sub;
}

HierarchicalGroup::HierarchicalGroup(const BackendArgs& args, const HostLayout& layout,
                                     Backend between)
    : ProcessGroup(args.rank, args.size, args.options), layout_(layout), between_kind_(between),
      host_(layout.host_of.at(args.rank)) {
  TORCH_INTERNAL_ASSERT(between == Backend::kGloo || between == Backend::kMpi);
  // MPI's ranks are its groups' ranks: the store's must be the same (a clear error if not).
  if (between == Backend::kMpi) mpi_world(args.rank, args.size);
  TORCH_CHECK(args.options.device.is_cpu(), where(), "the hierarchical backend works on CPU "
              "tensors (a CUDA group stages them: docs/backends.md), not ", args.options.device);
  TORCH_INTERNAL_ASSERT(static_cast<int>(layout.host_of.size()) == args.size);
  check_settings_agree(*args.store, rank(), size(), {{"backend", backend()}},
                       options().timeout, where());
  const bool mpi = between == Backend::kMpi;
  // Inside first, then between, then flat: each waits only for ranks that finished the one
  // before (a leader is in both of the first two).
  const int local_size = layout_.local_size(rank());
  if (local_size > 1) {
    inside_ = std::make_shared<ShmGroup>(sub_group(args, "hier/host" + std::to_string(host_),
                                                   layout_.local_rank_of[rank()], local_size));
  }
  if (layout_.hosts() > 1 && layout_.is_leader(rank())) {
    auto leaders = sub_group(args, "hier/leaders", host_, layout_.hosts());
    if (mpi) {
      for (int h = 0; h < layout_.hosts(); ++h) leaders.members.push_back(layout_.leader(h));
    }
    between_ = mpi ? make_mpi_group(leaders) : make_gloo_group(leaders);
  }
  flat_args_ = sub_group(args, "hier/all", rank(), size());
  if (mpi) flat_ = make_mpi_group(flat_args_);  // MPI_COMM_WORLD's ranks: no connections to make
  issuer_ = std::make_unique<Issuer>(options().timeout, where(), "hierarchical");
}

// Note [The flat group on first use]
// The flat group of every rank serves all-gather and reduce-scatter only; DDP's all-reduces
// and broadcasts, and barriers, never touch it. Over gloo it is a full mesh: at 64 ranks each rank
// held 63 connections (and a thread's worth of state for each) that a DDP job never used, and
// their set-up was the largest part of the group's. So it is made when first used, on the
// issuer thread: every rank issues the same collectives in the same order, so every rank makes
// it at the same point, in a collective of its own (a set-up failure or timeout is that
// collective's error). Over MPI it is MPI_COMM_WORLD and costs nothing: made at once.
ProcessGroup& HierarchicalGroup::flat() {
  if (!flat_) flat_ = make_gloo_group(flat_args_);
  return *flat_;
}

std::shared_ptr<Work> HierarchicalGroup::issue(Steps steps) {
  return issuer_->submit([this, steps = std::move(steps)]() -> std::shared_ptr<Work> {
    run(steps);
    auto done = std::make_shared<CompletionWork>(options().timeout, where());
    done->complete();
    return done;
  });
}

std::shared_ptr<Work> HierarchicalGroup::do_allreduce(at::Tensor& tensor,
                                                      const AllreduceOptions& opts) {
  at::Tensor t = tensor;
  // Each step sums; the average divides once, at the end (and so differs from flat gloo's,
  // which divides every rank's tensor first, in the last bits).
  const ReduceOp op = opts.op == ReduceOp::kAvg ? ReduceOp::kSum : opts.op;
  Steps s{"allreduce", nullptr, nullptr, t, nullptr};
  if (inside_) s.inside = [this, t, op]() mutable { return inside_->allreduce(t, {op}); };
  if (between_) s.between = [this, t, op]() mutable { return between_->allreduce(t, {op}); };
  if (opts.op == ReduceOp::kAvg) s.finish = [t, n = size()]() mutable { t.div_(n); };
  return issue(std::move(s));
}

std::shared_ptr<Work> HierarchicalGroup::do_broadcast(at::Tensor& tensor,
                                                      const BroadcastOptions& opts) {
  at::Tensor t = tensor;
  const int root_host = layout_.host_of[opts.root];
  const int root_local = layout_.local_rank_of[opts.root];
  Steps s{"broadcast", nullptr, nullptr, t, nullptr};
  // With one host, step 1 is the whole broadcast; else step 3 spreads what the leaders got.
  if (inside_ && host_ == root_host && (root_local != 0 || layout_.hosts() == 1)) {
    s.inside = [this, t, root_local]() mutable { return inside_->broadcast(t, {root_local}); };
  }
  if (between_) s.between = [this, t, root_host]() mutable {
    return between_->broadcast(t, {root_host});
  };
  return issue(std::move(s));
}

// A barrier in the three steps (Note [Hierarchical collectives]): inside each host, between the
// leaders, and inside each host again (a one-element broadcast from the leader), so that no rank
// leaves before every rank arrived, without the flat group: dpx's checkpointers call barrier()
// in every job, and the flat group's full mesh is what Note [The flat group on first use] saves.
std::shared_ptr<Work> HierarchicalGroup::do_barrier() {
  Steps s{"barrier", nullptr, nullptr, at::zeros({1}, at::kLong), nullptr};
  if (inside_) s.inside = [this] { return inside_->barrier(); };
  if (between_) s.between = [this] { return between_->barrier(); };
  return issue(std::move(s));
}


void HierarchicalGroup::run(const Steps& s) {
  if (broken_) std::rethrow_exception(broken_);
  try {
    run_steps(s);
  } catch (const MismatchError&) {
    throw;  // every rank raised it, in step (Note [Hierarchical errors])
  } catch (...) {
    break_group(std::current_exception());
    throw;
  }
}

void HierarchicalGroup::run_steps(const Steps& s) {
  std::exception_ptr host_disagreed, hosts_disagreed;
  if (s.inside) {
    try {
      s.inside()->wait();
    } catch (const MismatchError&) {
      host_disagreed = std::current_exception();
    }
  }
  if (between_) {
    try {
      // A host that disagreed tells the other leaders by a call that cannot match theirs: an
      // all-gather (step 2 runs all-reduce, broadcast and barrier only).
      (host_disagreed ? signal(*between_) : s.between())->wait();
    } catch (const MismatchError&) {
      if (!host_disagreed) hosts_disagreed = std::current_exception();
    }
  }
  if (host_disagreed) rethrow_mismatch(host_disagreed, s.op, Found::kInside);
  // Step 3 exists where the result must still reach this host's ranks from its leader.
  const bool spread = inside_ && layout_.hosts() > 1;
  const bool leader = layout_.is_leader(rank());
  if (hosts_disagreed) {
    if (spread) {
      try {
        signal(*inside_)->wait();  // cannot match the host's broadcast: they raise too
      } catch (const MismatchError&) {
      }
    }
    rethrow_mismatch(hosts_disagreed, s.op, Found::kBetween);
  }
  if (s.finish && (leader || !spread)) s.finish();
  if (!spread) return;
  at::Tensor t = s.result;
  try {
    inside_->broadcast(t, {0})->wait();
  } catch (const MismatchError&) {
    rethrow_mismatch(std::current_exception(), s.op, Found::kSpread);
  }
}

void HierarchicalGroup::rethrow_mismatch(std::exception_ptr e, const char* op,
                                         Found found) const {
  std::string what;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    what = x.what();
  }
  const std::string head = where() + "hierarchical " + op + ": ranks disagree on the collective";
  const std::string leader = std::to_string(layout_.leader(host_));
  switch (found) {
    case Found::kInside:
      throw MismatchError(head + " inside this host: " + what);
    case Found::kSpread:
      throw MismatchError(head + ", inside this host or between the hosts (then this host's "
                          "leader, rank " + leader + ", found it and calls allgather here; its "
                          "error names both calls): " + what);
    case Found::kBetween:
      break;
  }
  std::string leaders;
  for (int h = 0; h < layout_.hosts(); ++h) {
    leaders += (h ? ", " : "") + std::to_string(h) + " = rank " +
               std::to_string(layout_.leader(h));
  }
  throw MismatchError(head + " between the hosts (found by the hosts' leaders, whose group has "
                      "ranks " + leaders + "; a leader that called allgather speaks for a host "
                      "whose own ranks disagreed): " + what);
}

void HierarchicalGroup::break_group(std::exception_ptr error) {
  broken_ = error;
  std::string what;
  shm::AbortKind kind = shm::AbortKind::kOther;
  try {
    std::rethrow_exception(error);
  } catch (const PeerLostError& e) {
    kind = shm::AbortKind::kPeerLost;
    what = e.what();
  } catch (const TimeoutError& e) {
    kind = shm::AbortKind::kTimeout;
    what = e.what();
  } catch (const std::exception& e) {
    what = e.what();
  }
  if (inside_) inside_->abort(kind, "hierarchical group failed: " + what);
  between_.reset();  // closes its connections: the other leaders' step 2 fails at once
}

}  // namespace

std::shared_ptr<ProcessGroup> make_hierarchical_group(const BackendArgs& args,
                                                      const HostLayout& layout, Backend between) {
  return std::make_shared<HierarchicalGroup>(args, layout, between);
}

}  // namespace dpx::detail
