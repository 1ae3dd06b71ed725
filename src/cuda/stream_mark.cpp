#include "cuda/stream_mark.h"

#include <c10/util/Exception.h>

#if DPX_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dpx::detail {

#if DPX_WITH_CUDA
namespace {

class CudaMark : public StreamMark {
 public:
  // cudaEventDefault: timed (c10's default event flags disable timing).
  CudaMark(const at::cuda::CUDAStream& stream) : device_(stream.device()), event_(cudaEventDefault) {
    event_.record(stream);
  }
  bool reached() override { return event_.query(); }
  void wait_reached() override { event_.synchronize(); }
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
  return std::make_unique<CudaMark>(at::cuda::getCurrentCUDAStream(device.index()));
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
  return std::make_unique<CudaMark>(side);
}

#else  // !DPX_WITH_CUDA

std::unique_ptr<StreamMark> mark_current_stream(at::Device device) {
  TORCH_CHECK(!device.is_cuda(), "a CUDA stream was asked for, but dpx was built without CUDA");
  return nullptr;
}

std::unique_ptr<StreamMark> copy_to_host_async(const at::Tensor& source, at::Tensor& host) {
  host.copy_(source);
  return nullptr;
}

#endif  // DPX_WITH_CUDA

}  // namespace dpx::detail
