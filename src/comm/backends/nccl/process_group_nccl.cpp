// The nccl backend: c10d's ProcessGroupNCCL behind dpx's interface, one CUDA device per rank
// (docs/backends.md says why it wraps c10d rather than calling NCCL itself).
#include "comm/backends/nccl/process_group_nccl.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <memory>
#include <string>

#include "comm/coordination/consistency.h"
#include "comm/backends/nccl/translate.h"
#include "dpx/errors.h"

#if DPX_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "comm/backends/c10d/c10d_work.h"
#include "store/c10d_adapter.h"
#include "runtime/cuda/nccl_error_handling.h"

namespace dpx::detail {
namespace {

c10d::ReduceOp nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return c10d::ReduceOp::SUM;
    case ReduceOp::kAvg: return c10d::ReduceOp::AVG;  // ncclAvg (NCCL 2.10+)
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kProduct: return c10d::ReduceOp::PRODUCT;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown ReduceOp");
}

// Note [Aborting a failed NCCL group]
// ProcessGroupNCCL::shutdown() is the graceful end: it finalizes the communicator, which waits
// for the work queued on it. After a collective failed or timed out that work may never finish
// (a stopped peer holds it), and a destructor that waits for it hangs the rank that was told of
// the fault. So, as PyTorch does on its error paths, a group whose works reported a failure is
// aborted instead: its communicator is torn down without waiting.

class NcclWork : public C10dWork {
 public:
  NcclWork(c10::intrusive_ptr<c10d::Work> work, std::chrono::milliseconds timeout,
           std::string where, const char* op, std::shared_ptr<std::atomic<bool>> failed)
      : C10dWork(std::move(work), rethrow_nccl_error, timeout, std::move(where), op),
        failed_(std::move(failed)) {}

  void wait(std::chrono::milliseconds timeout) override {
    try {
      C10dWork::wait(timeout);
    } catch (...) {
      failed_->store(true);
      throw;
    }
  }
  using Work::wait;

  // Stream order only (Work::synchronize): the current stream waits for the NCCL stream. A
  // failure c10d's watchdog has already recorded is thrown here; a later one at the next call.
  void synchronize() override {
    try {
      if (auto error = work_->exception()) std::rethrow_exception(error);
      work_->synchronize();
    } catch (const std::exception& e) {
      failed_->store(true);
      rethrow_(e, where_, op_, default_timeout_);
    }
  }

 private:
  std::shared_ptr<std::atomic<bool>> failed_;  // the group's: Note [Aborting a failed NCCL group]
};

class NcclGroup : public ProcessGroup {
 public:
  explicit NcclGroup(const BackendArgs& args)
      : ProcessGroup(args.rank, args.size, args.options), store_(args.store) {
    const at::Device device = args.options.device;
    TORCH_CHECK(device.is_cuda() && device.has_index(), where(), "the nccl backend works on one "
                "CUDA device per rank, not ", device, "; give cuda:N (or cuda, for LOCAL_RANK)");
    check_settings_agree(*store_, rank(), size(), {{"backend", "nccl"}}, options().timeout,
                         where());
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = options().timeout;
    if (dpx_handles_nccl_errors() && !nccl_errors_reach_dpx()) {
      TORCH_WARN_ONCE(where(), "TORCH_NCCL_ASYNC_ERROR_HANDLING is not 2: c10d's watchdog will "
                      "end this process when an NCCL collective fails or times out, instead of "
                      "dpx's typed errors. dpx::init_process() (which init_process_group calls) "
                      "sets it; DPX_NCCL_ERROR_HANDLING=c10d silences this "
                      "(Note [NCCL error handling])");
    }
    try {
      pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10d_group_store(store_, "nccl", rank()),
                                                        rank(), size(), opts);
      // Eager: the communicator is made now, so a missing or failing peer shows here.
      pg_->setBoundDeviceId(device);
      pg_->eagerConnectSingleDevice(device);
    } catch (const std::exception& e) {
      rethrow_nccl_error(e, where(), "connect to the other ranks", options().timeout);
    }
  }
  ~NcclGroup() override {
    // The inspector first: its thread asks our works whether they completed, which reads the
    // communicator that shutdown() destroys. Without shutdown() c10d warns at exit that the
    // group was not destroyed; a failure here (an aborted communicator) has nothing left to
    // report to. A failed group is aborted: Note [Aborting a failed NCCL group].
    stop_stall_inspector();
    try {
      if (failed_->load()) {
        pg_->abort();
      } else {
        pg_->shutdown();
      }
    } catch (const std::exception&) {
    }
  }
  std::string backend() const override { return "nccl"; }

 protected:
  std::shared_ptr<Work> do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) override {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions o;
    o.reduceOp = nccl_op(opts.op);
    return launch("allreduce", [&] { return pg_->allreduce(tensors, o); });
  }
  std::shared_ptr<Work> do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) override {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions o;
    o.rootRank = opts.root;
    return launch("broadcast", [&] { return pg_->broadcast(tensors, o); });
  }
  // Note [Single-buffer collectives]
  // Called through c10d::Backend, _allgather_base and _reduce_scatter_base reach ProcessGroupNCCL
  // in every LibTorch 2.x: it overrides them up to 2.14, and from 2.15 on Backend forwards them to
  // all_gather_single / reduce_scatter_single.
  std::shared_ptr<Work> do_allgather(at::Tensor& output, const at::Tensor& input) override {
    at::Tensor out = output.view({-1});
    at::Tensor in = input.view({-1});
    c10d::Backend& backend = *pg_;
    return launch("allgather", [&] { return backend._allgather_base(out, in); });
  }
  std::shared_ptr<Work> do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                          const ReduceScatterOptions& opts) override {
    at::Tensor out = output.view({-1});
    at::Tensor in = input.view({-1});
    c10d::ReduceScatterOptions o;
    o.reduceOp = nccl_op(opts.op);
    c10d::Backend& backend = *pg_;
    return launch("reduce_scatter", [&] { return backend._reduce_scatter_base(out, in, o); });
  }
  std::shared_ptr<Work> do_barrier() override {
    c10d::BarrierOptions o;
    o.device_ids = {options().device.index()};
    return launch("barrier", [&] { return pg_->barrier(o); });
  }

 private:
  template <typename F>
  std::shared_ptr<Work> launch(const char* op, F&& start) {
    try {
      return std::make_shared<NcclWork>(start(), options().timeout, where(), op, failed_);
    } catch (const std::exception& e) {
      failed_->store(true);
      rethrow_nccl_error(e, where(), op, options().timeout);
    }
  }

  std::shared_ptr<Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;
  std::shared_ptr<std::atomic<bool>> failed_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(const BackendArgs& args) {
  return std::make_shared<NcclGroup>(args);
}

}  // namespace dpx::detail

#else  // !DPX_WITH_CUDA

namespace dpx::detail {

std::shared_ptr<ProcessGroup> make_nccl_group(const BackendArgs& args) {
  TORCH_CHECK(false, where(args.rank, args.size), "the nccl backend needs dpx built with CUDA "
              "support, and this one was not (DPX_CUDA, docs/install.md: it needs a CUDA-enabled "
              "LibTorch). CUDA tensors still work over shm or gloo, staged through host memory.");
}

}  // namespace dpx::detail

#endif  // DPX_WITH_CUDA
