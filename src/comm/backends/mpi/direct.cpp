// Device tensors straight to a CUDA-aware MPI (Note [Direct collectives]).
#include "comm/backends/mpi/direct.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <string>
#include <thread>

#include "comm/copy_back_work.h"
#include "comm/coordination/issuer.h"
#include "dpx/errors.h"
#include "runtime/cuda/stream_mark.h"

namespace dpx::detail::mpi {
namespace {

// Note [Direct collectives]
// A CUDA-aware MPI reads and writes device memory itself (Note [CUDA-aware MPI] in cuda_path.h),
// but knows nothing of CUDA streams: it reads a tensor when the MPI thread starts the collective,
// and the kernels that wrote it (the backward pass, for a gradient) may still be queued on the
// caller's stream. So, as the staged groups do around their copies
// (Note [Staged collectives]):
//  1. On the caller's thread, a mark is recorded on the device's current stream; the caller
//     does not wait. A reduce-scatter whose output lies inside its input reduces from a copy
//     made here, on that stream (the mpi group would copy on its own thread's stream, which
//     nothing orders before MPI's read).
//  2. The group's issuer thread, in call order, waits (polling, within the group's timeout)
//     until the device has reached the mark, then hands the tensors to the mpi group on that
//     device, whose MPI thread starts the collective on their pointers.
//  3. The MPI has written the result when the collective completes. An average is a sum there,
//     divided in wait() on the waiting thread's current stream (CopyBackWork): the mpi group
//     would divide on the MPI thread's stream, which the caller's stream does not follow.
// Device memory stays alive until the collective completes: the mpi group's collective holds
// the tensors. 16-bit float reductions are refused: dpx reduces float16 and bfloat16 with its
// own MPI_Op (comm/backends/mpi/datatypes.h), which computes on the host.
class DirectGroup : public ProcessGroup {
 public:
  DirectGroup(std::shared_ptr<ProcessGroup> inner, Options options)
      : ProcessGroup(inner->rank(), inner->size(), options), inner_(std::move(inner)),
        issuer_(options.timeout, where(), backend(), options.device) {
    TORCH_INTERNAL_ASSERT(inner_->options().device == options.device,
                          "a direct group's mpi group must be on its device");
  }
  std::string backend() const override { return inner_->backend() + "-cuda-aware"; }

 protected:
  std::shared_ptr<Work> do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) override {
    check_reducible(tensor, "allreduce");
    AllreduceOptions sum = opts;
    if (opts.op == ReduceOp::kAvg) sum.op = ReduceOp::kSum;
    auto work = issue([this, t = tensor, sum]() mutable { return inner_->allreduce(t, sum); });
    return averaged(std::move(work), tensor, opts.op);
  }
  std::shared_ptr<Work> do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) override {
    return issue([this, t = tensor, opts]() mutable { return inner_->broadcast(t, opts); });
  }
  std::shared_ptr<Work> do_allgather(at::Tensor& output, const at::Tensor& input) override {
    return issue([this, out = output, in = input]() mutable { return inner_->allgather(out, in); });
  }
  std::shared_ptr<Work> do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                          const ReduceScatterOptions& opts) override {
    check_reducible(input, "reduce_scatter");
    const auto* in = static_cast<const char*>(input.data_ptr());
    const auto* out = static_cast<const char*>(output.data_ptr());
    const bool overlap = out < in + input.nbytes() && in < out + output.nbytes();
    ReduceScatterOptions sum = opts;
    if (opts.op == ReduceOp::kAvg) sum.op = ReduceOp::kSum;
    auto work = issue([this, o = output, i = overlap ? input.clone() : input, sum]() mutable {
      return inner_->reduce_scatter(o, i, sum);
    });
    return averaged(std::move(work), output, opts.op);
  }
  // Through the issuer too: a barrier is ordered after the collectives called before it.
  std::shared_ptr<Work> do_barrier() override {
    return issuer_.submit([this] { return inner_->barrier(); });
  }

 private:
  void check_reducible(const at::Tensor& t, const char* op) const {
    TORCH_CHECK(t.scalar_type() != at::kHalf && t.scalar_type() != at::kBFloat16, where(),
                backend(), ": ", op, " of ", t.scalar_type(), " over a CUDA-aware MPI: dpx "
                "reduces 16-bit floats with its own MPI_Op, which computes on the host and "
                "cannot read device memory. Reduce in float32, or set DPX_MPI_CUDA_AWARE=0 to "
                "stage this job's CUDA groups through host memory");
  }
  // Steps 1 and 2.
  template <typename Launch>
  std::shared_ptr<Work> issue(Launch launch) {
    std::shared_ptr<StreamMark> ready = mark_current_stream(options().device);
    return issuer_.submit([this, ready, launch]() mutable {
      if (ready) wait_until_reached(*ready);
      return launch();
    });
  }
  void wait_until_reached(StreamMark& ready) const {
    const auto limit = options().timeout;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!ready.reached()) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw TimeoutError(where() + backend() + ": the work queued on the device before this "
                           "collective did not finish within " + std::to_string(limit.count()) +
                           " ms: the device is stuck or busy");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // Step 3.
  std::shared_ptr<Work> averaged(std::shared_ptr<Work> work, at::Tensor result, ReduceOp op) {
    if (op != ReduceOp::kAvg) return work;
    auto divide = [result, w = size()]() mutable { result.div_(w); };
    return std::make_shared<CopyBackWork>(std::move(work), std::move(divide), options().timeout);
  }

  std::shared_ptr<ProcessGroup> inner_;
  Issuer issuer_;  // last: its thread stops (issuing what is queued) before inner_ goes
};

}  // namespace

std::shared_ptr<ProcessGroup> make_direct_group(std::shared_ptr<ProcessGroup> inner,
                                                ProcessGroup::Options options) {
  return std::make_shared<DirectGroup>(std::move(inner), options);
}

}  // namespace dpx::detail::mpi
