#include "runtime/cuda/stream_mark.h"

#include <c10/util/Exception.h>

#if DPX_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dpx::detail {

#if DPX_WITH_CUDA
namespace {

// Every call guards the mark's device: the thread asking (a staged group's issuer, the thread
// reading DDP's statistics) may have another current device, and CUDA would otherwise make a
// context on it.
class CudaMark : public StreamMark {
 public:
  CudaMark(const at::cuda::CUDAStream& stream, unsigned int flags)
      : device_(stream.device()), event_(flags) {
    c10::cuda::CUDAGuard guard(device_);
    event_.record(stream);
  }
  void record() override {
    c10::cuda::CUDAGuard guard(device_);
    event_.record(at::cuda::getCurrentCUDAStream(device_.index()));
  }
  bool reached() override {
    c10::cuda::CUDAGuard guard(device_);
    return event_.query();
  }
  void wait_reached() override {
    c10::cuda::CUDAGuard guard(device_);
    event_.synchronize();
  }
  double ms_since(StreamMark& earlier) override {
    auto* e = dynamic_cast<CudaMark*>(&earlier);
    TORCH_INTERNAL_ASSERT(e != nullptr, "ms_since: marks of different kinds");
    e->wait_reached();
    wait_reached();
    c10::cuda::CUDAGuard guard(device_);
    return e->event_.elapsed_time(event_);
  }

 private:
  at::Device device_;
  at::cuda::CUDAEvent event_;
};

}  // namespace

std::unique_ptr<StreamMark> mark_current_stream(at::Device device) {
  if (!device.is_cuda()) return nullptr;
  // cudaEventDefault: timed (c10's default flags disable timing).
  return std::make_unique<CudaMark>(at::cuda::getCurrentCUDAStream(device.index()),
                                    cudaEventDefault);
}

// The side stream waits for what the current stream has queued (the gradient being copied), so
// the copy neither runs early nor holds up the kernels queued after it on the current stream;
// record_stream keeps the allocator from reusing the source's memory before the copy read it.
std::unique_ptr<StreamMark> copy_to_host_async(const at::Tensor& source, at::Tensor& host) {
  if (!source.is_cuda()) {
    host.copy_(source);
    return nullptr;
  }
  const at::Device device = source.device();
  c10::cuda::CUDAGuard guard(device);
  const auto current = at::cuda::getCurrentCUDAStream(device.index());
  const auto side = at::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  at::cuda::CUDAEvent queued;
  queued.record(current);
  queued.block(side);
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    host.copy_(source, /*non_blocking=*/true);
  }
  source.record_stream(side);
  return std::make_unique<CudaMark>(side, cudaEventDisableTiming);
}

#else  // !DPX_WITH_CUDA

// Without dpx's CUDA code a CUDA group (staged) is timed by the host clock, as the CPU is.
std::unique_ptr<StreamMark> mark_current_stream(at::Device) { return nullptr; }

std::unique_ptr<StreamMark> copy_to_host_async(const at::Tensor& source, at::Tensor& host) {
  host.copy_(source);
  return nullptr;
}

#endif  // DPX_WITH_CUDA

}  // namespace dpx::detail
