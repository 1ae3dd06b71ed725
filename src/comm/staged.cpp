// Device tensors over a host backend (Note [Staged collectives]).
#include <c10/util/Exception.h>

#include "comm/setup/factory.h"
#include "comm/copy_back_work.h"

namespace dpx::detail {
namespace {

// Note [Staged collectives]
// Ranks that share a GPU (NCCL refuses two ranks on one device), or whose dpx has no NCCL,
// still run collectives on device tensors: each call copies its input into a host buffer
// (pinned, for CUDA: the copies are DMA, and LibTorch caches pinned blocks), runs the host
// group's collective on it, and copies the result back once the host collective has finished
// (CopyBackWork: in wait(), never in is_completed()). The copy out is
// blocking and ordered after the work queued on the current stream; the copy back is queued on
// the waiting thread's current stream, so what follows there sees the result. Nothing else
// touches the device: this file is device-agnostic.
class StagedGroup : public ProcessGroup {
 public:
  StagedGroup(std::shared_ptr<ProcessGroup> host, Options options)
      : ProcessGroup(host->rank(), host->size(), options), host_(std::move(host)) {
    TORCH_CHECK(host_->options().device.is_cpu(), where(), "a staged group needs a CPU group "
                "underneath, got one on ", host_->options().device);
  }
  std::string backend() const override { return host_->backend() + "-staged"; }

 protected:
  std::shared_ptr<Work> do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) override {
    at::Tensor h = stage(tensor);
    return staged(host_->allreduce(h, opts), tensor, h);
  }
  std::shared_ptr<Work> do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) override {
    at::Tensor h = stage(tensor);
    return staged(host_->broadcast(h, opts), tensor, h);
  }
  std::shared_ptr<Work> do_allgather(at::Tensor& output, const at::Tensor& input) override {
    at::Tensor in = stage(input);
    at::Tensor out = host_buffer(output);
    return staged(host_->allgather(out, in), output, out);
  }
  std::shared_ptr<Work> do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                          const ReduceScatterOptions& opts) override {
    at::Tensor in = stage(input);
    at::Tensor out = host_buffer(output);
    return staged(host_->reduce_scatter(out, in, opts), output, out);
  }
  std::shared_ptr<Work> do_barrier() override { return host_->barrier(); }

 private:
  at::Tensor host_buffer(const at::Tensor& like) const {
    const bool pin = options().device.is_cuda();
    return at::empty(like.sizes(), like.options().device(at::kCPU).pinned_memory(pin));
  }
  // A host copy of `t`; a blocking copy, so the host collective reads finished data.
  at::Tensor stage(const at::Tensor& t) const {
    at::Tensor h = host_buffer(t);
    h.copy_(t);
    return h;
  }
  std::shared_ptr<Work> staged(std::shared_ptr<Work> host, at::Tensor device, at::Tensor h) {
    auto back = [device, h]() mutable { device.copy_(h, /*non_blocking=*/device.is_cuda()); };
    return std::make_shared<CopyBackWork>(std::move(host), std::move(back), options().timeout);
  }

  std::shared_ptr<ProcessGroup> host_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_staged_group(std::shared_ptr<ProcessGroup> host,
                                                ProcessGroup::Options options) {
  return std::make_shared<StagedGroup>(std::move(host), options);
}

}  // namespace dpx::detail
