// The mpi backend's group: each call becomes a Collective (Note [MPI collective steps] in
// collective.h) that the process's MPI thread runs (Note [MPI thread] in runtime.h).
#include "comm/backends/mpi/process_group_mpi.h"

#include <c10/util/Exception.h>

#include "dpx/errors.h"

#if DPX_WITH_MPI
#include <algorithm>
#include <climits>
#include <limits>
#include <vector>

#include "comm/backends/mpi/collective.h"
#include "comm/backends/mpi/cuda_query.h"
#include "comm/backends/mpi/datatypes.h"
#include "comm/backends/mpi/direct.h"
#include "comm/backends/mpi/ring.h"
#include "comm/backends/mpi/runtime.h"
#include "comm/backends/mpi/scratch.h"
#include "comm/backends/mpi/setup.h"
#include "comm/backends/mpi/shared.h"
#include "comm/backends/mpi/subgroup.h"
#include "comm/coordination/consistency.h"
#include "comm/shared_memory.h"
#include "dpx/runtime/cuda.h"
#include "runtime/env_read.h"

namespace dpx::detail {
namespace {

class MpiGroup : public ProcessGroup, public SharedMemory {
 public:
  explicit MpiGroup(const BackendArgs& args);
  ~MpiGroup() override;
  std::string backend() const override { return "mpi"; }
  // Note [Shared buckets over MPI] in shared.h, step 1.
  at::Tensor allocate_shared(std::size_t bytes) override;

 protected:
  std::shared_ptr<Work> do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) override;
  std::shared_ptr<Work> do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) override;
  std::shared_ptr<Work> do_allgather(at::Tensor& output, const at::Tensor& input) override;
  std::shared_ptr<Work> do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                          const ReduceScatterOptions& opts) override;
  std::shared_ptr<Work> do_barrier() override;

 private:
  std::shared_ptr<Work> issue(const CollectiveDescriptor& desc, mpi::DataStep step);
  // MPI counts elements in an int.
  int count(const at::Tensor& t, const char* op) const;

  mpi::Runtime& runtime_;
  std::shared_ptr<mpi::Channel> channel_;
  // The ring's and the pair's scratch buffers, reused (Note [Scratch reuse] in scratch.h).
  std::shared_ptr<mpi::ScratchPool> scratch_ = std::make_shared<mpi::ScratchPool>();
  mpi::Wish shared_buckets_ = mpi::Wish::kDefault;  // DPX_MPI_SHARED_BUCKETS
  // The blocks made so far (Note [Shared buckets over MPI]), numbered in the descriptor's int16.
  SharedBlocks<mpi::SharedBlock> shared_{std::numeric_limits<std::int16_t>::max()};
};

MpiGroup::MpiGroup(const BackendArgs& args)
    : ProcessGroup(args.rank, args.size, args.options), runtime_(mpi::Runtime::instance()) {
  // CUDA only under a direct group, which hands over tensors once their stream reached them.
  TORCH_INTERNAL_ASSERT(args.options.device.is_cpu() || args.options.device.is_cuda(),
                        "an mpi group on ", args.options.device);
  if (args.members.empty()) {
    TORCH_CHECK(args.rank == runtime_.rank() && args.size == runtime_.size(), where(),
                "an mpi group without a member list is every rank of MPI_COMM_WORLD (rank ",
                runtime_.rank(), " of ", runtime_.size(), "); for a sub-group, pass its members "
                "(new_process_group(\"mpi\", {}, members))");
  } else {
    TORCH_INTERNAL_ASSERT(static_cast<int>(args.members.size()) == args.size &&
                          args.members[args.rank] == runtime_.rank());
  }
  if (args.store) {
    check_settings_agree(*args.store, rank(), size(), {{"backend", "mpi"}}, options().timeout,
                         where());
  }
  channel_ = std::make_shared<mpi::Channel>();
  channel_->rank = rank();
  channel_->size = size();
  channel_->where = where();
  channel_->timeout = options().timeout;
  channel_->runtime = &runtime_;
  channel_->may_block = detail::env_int("DPX_MPI_BLOCKING", 0, 1).value_or(0) == 1;
  channel_->ring = detail::env_int("DPX_MPI_RING", 0, 1).value_or(1) == 1;
  if (auto v = detail::env_int("DPX_MPI_SHARED_BUCKETS", 0, 1)) {
    shared_buckets_ = *v == 1 ? mpi::Wish::kRequired : mpi::Wish::kOff;
  }
  // A sub-group's own communicator first, by its members only; both are then duplicated from
  // it (or from MPI_COMM_WORLD), and it is freed.
  const MPI_Comm parent = args.members.empty() ? MPI_COMM_WORLD :
      mpi::create_subgroup_comm(runtime_, args.members, options().timeout, where());
  // MPI_Comm_idup, not MPI_Comm_dup: a rank that never makes the group must end in a timeout
  // here, not block the MPI thread (and every other group's collectives) for ever. One at a
  // time (Note [One creation at a time] in setup.h).
  const auto free_parent = [parent] {  // on the MPI thread, once both are made (or failed)
    if (parent == MPI_COMM_WORLD) return;
    MPI_Comm freed = parent;
    MPI_Comm_free(&freed);
  };
  auto ch = channel_;
  auto made = std::make_shared<CompletionWork>(options().timeout, where());
  runtime_.submit(std::make_shared<mpi::SetupTask>(
      parent, std::vector<MPI_Comm*>{&ch->data, &ch->check}, &ch->epoch,
      std::chrono::steady_clock::now() + options().timeout, made, ch, where()));
  try {
    const mpi::Waiting waiting(runtime_);  // the MPI thread spins for the creation
    made->wait();
  } catch (const TimeoutError&) {
    throw TimeoutError(where() + "mpi: the other ranks did not all make the group within " +
                       std::to_string(options().timeout.count()) + " ms (every member, all of "
                       "MPI_COMM_WORLD without a member list, makes each mpi group, in the same "
                       "order)");
  } catch (const DistributedError&) {
    // MPI refused one of the creations; none is in flight, so free what was made (the
    // destructor does not run for a group that failed to form).
    runtime_.call([&] {
      for (MPI_Comm* c : {&ch->data, &ch->check}) {
        if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
      }
      free_parent();
    });
    throw;
  }
  // SetupTask gave both communicators MPI_ERRORS_RETURN as they were made.
  runtime_.call(free_parent);
}

// Note [Destroying a group] in setup.h: the collectives taken in finish first, then the
// communicators go; the destructor waits for that for a while, not the group's whole timeout.
MpiGroup::~MpiGroup() {
  try {
    const auto limit =
        std::min<std::chrono::milliseconds>(options().timeout, std::chrono::seconds(10));
    auto freed = std::make_shared<CompletionWork>(limit, where());
    runtime_.submit(std::make_shared<mpi::CloseTask>(channel_, freed));
    const mpi::Waiting waiting(runtime_);  // the MPI thread spins for the collectives left
    freed->wait();
  } catch (const std::exception&) {
    // Past the limit (CloseTask frees them when they settle), or the process exits (no task
    // can be queued; MPI_Finalize frees them).
  }
}

int MpiGroup::count(const at::Tensor& t, const char* op) const {
  TORCH_CHECK(t.numel() <= INT_MAX, where(), op, ": the mpi backend moves at most 2^31 - 1 "
              "elements per collective (MPI counts them in an int); this tensor has ",
              t.numel(), ". Split it.");
  return static_cast<int>(t.numel());
}

at::Tensor MpiGroup::allocate_shared(std::size_t bytes) {
  if (size() == 1) return {};
  const mpi::GatherInts gather = [this](const std::vector<std::int64_t>& mine) {
    const auto n = static_cast<std::int64_t>(mine.size());
    at::Tensor in = at::tensor(at::ArrayRef<std::int64_t>(mine), at::kLong);
    at::Tensor out = at::empty({n * size()}, at::kLong);
    allgather(out, in)->wait();
    const std::int64_t* p = out.data_ptr<std::int64_t>();
    return std::vector<std::int64_t>(p, p + n * size());
  };
  std::shared_ptr<mpi::SharedBlock> block = mpi::make_shared_block(
      bytes, rank(), size(), runtime_.host(), shared_buckets_, gather, where());
  if (!block) return {};
  shared_.add(block, block->copy(rank()), block->stride());
  return at::from_blob(block->copy(rank()), {static_cast<std::int64_t>(bytes)},
                       [block](void*) mutable { block.reset(); }, at::kByte);
}

std::shared_ptr<Work> MpiGroup::issue(const CollectiveDescriptor& desc, mpi::DataStep step) {
  auto work = std::make_shared<mpi::MpiWork>(channel_, desc);
  runtime_.submit(std::make_shared<mpi::Collective>(channel_, desc, std::move(step), work));
  return work;
}

std::shared_ptr<Work> MpiGroup::do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) {
  mpi::DataStep step;
  const int n = count(tensor, "allreduce");
  const MPI_Datatype type = mpi::datatype(tensor.scalar_type());
  const MPI_Op op = mpi::reduce_op(tensor.scalar_type(), opts.op);
  step.start = [t = tensor, n, type, op](MPI_Comm c, MPI_Request* r) {
    void* p = t.data_ptr();
    return r ? MPI_Iallreduce(MPI_IN_PLACE, p, n, type, op, c, r)
             : MPI_Allreduce(MPI_IN_PLACE, p, n, type, op, c);
  };
  CollectiveDescriptor desc =
      describe_call(CollectiveKind::kAllreduce, tensor, static_cast<int>(opts.op));
  if (auto found = shared_.find(tensor); found.block) {  // Note [Shared buckets over MPI]
    mpi::add_shared_allreduce(step, std::move(found.block), found.offset, tensor, type, op,
                              rank(), size(), runtime_.tag_ub());
    desc.shared = found.number;
    desc.root = static_cast<std::int32_t>(found.offset / 64);
  } else if (channel_->ring && mpi::use_pair(tensor, size(), opts.op)) {
    mpi::add_pair(step, tensor, type, op, rank(), scratch_);  // Note [Pair exchange] in ring.h
  } else if (channel_->ring && mpi::use_ring(tensor, size(), runtime_.tag_ub())) {
    mpi::add_ring(step, tensor, type, op, rank(), size(), runtime_.tag_ub(), scratch_);
  }
  // MPI has no average: a sum, then one division on the MPI thread, so every rank rounds alike.
  if (opts.op == ReduceOp::kAvg) {
    step.finish = [sum = std::move(step.finish), t = tensor, w = size()] {
      if (sum) sum();
      t.div_(w);
    };
  }
  return issue(desc, std::move(step));
}

std::shared_ptr<Work> MpiGroup::do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) {
  mpi::DataStep step;
  const int n = count(tensor, "broadcast");
  const MPI_Datatype type = mpi::datatype(tensor.scalar_type());
  step.start = [t = tensor, n, type, root = opts.root](MPI_Comm c, MPI_Request* r) {
    return r ? MPI_Ibcast(t.data_ptr(), n, type, root, c, r)
             : MPI_Bcast(t.data_ptr(), n, type, root, c);
  };
  return issue(describe_call(CollectiveKind::kBroadcast, tensor, 0, opts.root), std::move(step));
}

std::shared_ptr<Work> MpiGroup::do_allgather(at::Tensor& output, const at::Tensor& input) {
  mpi::DataStep step;
  const int n = count(input, "allgather");
  const MPI_Datatype type = mpi::datatype(input.scalar_type());
  // Input already in its slot of the output (FSDP gathers so): MPI asks for MPI_IN_PLACE.
  const std::size_t slot = static_cast<std::size_t>(rank()) * input.nbytes();
  const bool in_place = input.data_ptr() == static_cast<char*>(output.data_ptr()) + slot;
  step.start = [out = output, in = input, n, type, in_place](MPI_Comm c, MPI_Request* r) {
    const void* from = in_place ? MPI_IN_PLACE : in.data_ptr();
    return r ? MPI_Iallgather(from, n, type, out.data_ptr(), n, type, c, r)
             : MPI_Allgather(from, n, type, out.data_ptr(), n, type, c);
  };
  return issue(describe_call(CollectiveKind::kAllgather, input), std::move(step));
}

std::shared_ptr<Work> MpiGroup::do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                                  const ReduceScatterOptions& opts) {
  mpi::DataStep step;
  const int n = count(output, "reduce_scatter");
  count(input, "reduce_scatter");
  const MPI_Datatype type = mpi::datatype(input.scalar_type());
  const MPI_Op op = mpi::reduce_op(input.scalar_type(), opts.op);
  // MPI forbids overlapping send and receive buffers (its MPI_IN_PLACE means another layout):
  // an output inside the input reduces from a copy.
  const auto* in_begin = static_cast<const char*>(input.data_ptr());
  const auto* out_begin = static_cast<const char*>(output.data_ptr());
  const bool overlap =
      out_begin < in_begin + input.nbytes() && in_begin < out_begin + output.nbytes();
  at::Tensor source = overlap ? input.clone() : input;
  step.start = [out = output, in = source, n, type, op](MPI_Comm c, MPI_Request* r) {
    return r ? MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), n, type, op, c, r)
             : MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), n, type, op, c);
  };
  if (opts.op == ReduceOp::kAvg) step.finish = [t = output, w = size()] { t.div_(w); };
  return issue(describe_call(CollectiveKind::kReduceScatter, input, static_cast<int>(opts.op)),
               std::move(step));
}

std::shared_ptr<Work> MpiGroup::do_barrier() {
  mpi::DataStep step;
  step.start = [](MPI_Comm c, MPI_Request* r) { return r ? MPI_Ibarrier(c, r) : MPI_Barrier(c); };
  return issue(describe_call(CollectiveKind::kBarrier, at::Tensor()), std::move(step));
}

}  // namespace

MpiWorld mpi_world(int rank, int size) {
  mpi::Runtime& rt = mpi::Runtime::instance();
  const MpiWorld world{rt.rank(), rt.size()};
  TORCH_CHECK((rank < 0 || rank == world.rank) && (size < 0 || size == world.size),
              where(world.rank, world.size), "the mpi backend takes rank and world size from MPI "
              "(rank ", world.rank, " of ", world.size, ", ", rt.library(), "), but this process "
              "was told rank ", rank, " of ", size, " (RANK/WORLD_SIZE or InitOptions). Start "
              "every rank with the one launcher (mpirun, srun --mpi=pmix), or unset them.");
  return world;
}

std::shared_ptr<ProcessGroup> make_mpi_group(const BackendArgs& args) {
  auto group = std::make_shared<MpiGroup>(args);
  if (args.options.device.is_cpu()) return group;
  return mpi::make_direct_group(std::move(group), args.options);
}

bool mpi_takes_cuda_pointers(const BackendArgs& args) {
  TORCH_INTERNAL_ASSERT(args.options.device.is_cuda());
  const mpi::CudaPathInputs in{cuda::built(), mpi::mpi_cuda_support(),
                               env_string("DPX_MPI_CUDA_AWARE")};
  return mpi::choose_cuda_path(in, where(args.rank, args.size)) == mpi::CudaPath::kDirect;
}

}  // namespace dpx::detail

#else  // !DPX_WITH_MPI

namespace dpx::detail {
namespace {

[[noreturn]] void no_mpi(const std::string& where) {
  TORCH_CHECK(false, where, "the mpi backend needs dpx built with an MPI, and this one was "
              "not: no MPI C library was found when it was configured. Install one (Debian: "
              "apt-get install libopenmpi-dev openmpi-bin, or libmpich-dev mpich) and configure "
              "dpx again (docs/backends.md, \"The mpi backend\"); or use gloo.");
}

}  // namespace

MpiWorld mpi_world(int, int) { no_mpi(""); }

std::shared_ptr<ProcessGroup> make_mpi_group(const BackendArgs& args) {
  no_mpi(where(args.rank, args.size));
}

bool mpi_takes_cuda_pointers(const BackendArgs& args) { no_mpi(where(args.rank, args.size)); }

}  // namespace dpx::detail

#endif  // DPX_WITH_MPI
