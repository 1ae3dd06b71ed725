// Device tensors over a host backend (Note [Staged collectives]).
#include "comm/backends/staged/process_group_staged.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <string>
#include <thread>

#include "comm/copy_back_work.h"
#include "comm/coordination/issuer.h"
#include "runtime/cuda/stream_mark.h"
#include "dpx/errors.h"

namespace dpx::detail {
namespace {

// Note [Staged collectives]
// Ranks that share a GPU (NCCL refuses two ranks on one device), or whose dpx has no NCCL,
// still run collectives on device tensors, as PyTorch's gloo does on CUDA tensors:
//  1. On the caller's thread (a DDP gradient hook, say), the input is copied into a host
//     buffer (pinned, for CUDA: the copies are DMA, and LibTorch caches pinned blocks) on a side
//     stream, after the work queued on the current stream: the caller never waits for it.
//  2. The group's issuer thread, in call order, waits until that copy has finished and hands
//     the buffer to the host group's collective (one thread keeps every rank's order).
//  3. Once the host collective has finished, wait() copies the result back into the caller's
//     tensor, on the waiting thread's current stream (CopyBackWork: in wait(), never in
//     is_completed()), so what follows there sees it.
// Only the copy to the host (runtime/cuda/stream_mark.h) knows about streams: this file is
// device-agnostic, and with CPU "device" tensors the same steps run on host copies.
class StagedGroup : public ProcessGroup {
 public:
  StagedGroup(std::shared_ptr<ProcessGroup> host, Options options)
      : ProcessGroup(host->rank(), host->size(), options), host_(std::move(host)),
        issuer_(options.timeout, where(), backend(), options.device) {
    TORCH_CHECK(host_->options().device.is_cpu(), where(), "a staged group needs a CPU group "
                "underneath, got one on ", host_->options().device);
  }
  std::string backend() const override { return host_->backend() + "-staged"; }

 protected:
  std::shared_ptr<Work> do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) override {
    auto h = std::make_shared<Staged>(stage(tensor));
    return staged(issue(h, [this, h, opts] { return host_->allreduce(h->buffer, opts); }), tensor,
                  h->buffer);
  }
  std::shared_ptr<Work> do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) override {
    auto h = std::make_shared<Staged>(stage(tensor));
    return staged(issue(h, [this, h, opts] { return host_->broadcast(h->buffer, opts); }), tensor,
                  h->buffer);
  }
  std::shared_ptr<Work> do_allgather(at::Tensor& output, const at::Tensor& input) override {
    auto in = std::make_shared<Staged>(stage(input));
    at::Tensor out = host_buffer(output);
    return staged(issue(in, [this, in, out]() mutable { return host_->allgather(out, in->buffer); }),
                  output, out);
  }
  std::shared_ptr<Work> do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                          const ReduceScatterOptions& opts) override {
    auto in = std::make_shared<Staged>(stage(input));
    at::Tensor out = host_buffer(output);
    return staged(issue(in, [this, in, out, opts]() mutable {
                    return host_->reduce_scatter(out, in->buffer, opts);
                  }),
                  output, out);
  }
  // Through the issuer too: a barrier is ordered after the collectives called before it.
  std::shared_ptr<Work> do_barrier() override {
    return issuer_.submit([this] { return host_->barrier(); });
  }

 private:
  // A host copy of a tensor, and the mark its copy reaches (null: already copied).
  struct Staged {
    at::Tensor buffer;
    std::unique_ptr<StreamMark> copied;
  };

  at::Tensor host_buffer(const at::Tensor& like) const {
    const bool pin = options().device.is_cuda();
    return at::empty(like.sizes(), like.options().device(at::kCPU).pinned_memory(pin));
  }
  Staged stage(const at::Tensor& t) const {
    Staged s{host_buffer(t), nullptr};
    s.copied = copy_to_host_async(t, s.buffer);
    return s;
  }
  // Step 2: on the issuer thread, the host collective once its input is on the host. The
  // issuer polls rather than blocks in the driver, so a stuck GPU is a TimeoutError.
  template <typename Launch>
  std::shared_ptr<Work> issue(std::shared_ptr<Staged> input, Launch launch) {
    return issuer_.submit([this, input, launch]() mutable {
      if (input->copied) wait_for_copy(*input->copied);
      return launch();
    });
  }
  void wait_for_copy(StreamMark& copied) const {
    const auto limit = options().timeout;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!copied.reached()) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw TimeoutError(where() + backend() + ": the copy of a tensor from the device to the "
                           "host did not finish within " + std::to_string(limit.count()) +
                           " ms: the device is stuck or busy with work queued before it");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  std::shared_ptr<Work> staged(std::shared_ptr<Work> host, at::Tensor device, at::Tensor h) {
    auto back = [device, h]() mutable { device.copy_(h, /*non_blocking=*/device.is_cuda()); };
    return std::make_shared<CopyBackWork>(std::move(host), std::move(back), options().timeout);
  }

  std::shared_ptr<ProcessGroup> host_;
  Issuer issuer_;  // last: its thread stops (issuing what is queued) before host_ goes
};

}  // namespace

std::shared_ptr<ProcessGroup> make_staged_group(std::shared_ptr<ProcessGroup> host,
                                                ProcessGroup::Options options) {
  return std::make_shared<StagedGroup>(std::move(host), options);
}

}  // namespace dpx::detail
