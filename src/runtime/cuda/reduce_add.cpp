#include "runtime/cuda/reduce_add.h"

#include <map>
#include <set>

#if DPX_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/cuda/nccl.h>
#endif

namespace dpx::detail {
#if DPX_WITH_CUDA
namespace {

bool distinct_cuda_devices(const std::vector<at::Device>& devices) {
  std::set<c10::DeviceIndex> seen;
  for (const auto& d : devices) {
    if (!d.is_cuda() || !d.has_index() || !seen.insert(d.index()).second) return false;
  }
  return true;
}

// The parameters every replica has a dense gradient for, on its own device, grouped by dtype.
std::map<at::ScalarType, std::vector<size_t>> reducible_by_dtype(
    const std::vector<std::vector<at::Tensor>>& grads, const std::vector<at::Device>& devices) {
  std::map<at::ScalarType, std::vector<size_t>> groups;
  for (size_t j = 0; j < grads.front().size(); ++j) {
    const auto& first = grads.front()[j];
    bool all = true;
    for (size_t r = 0; r < grads.size() && all; ++r) {
      const auto& g = grads[r][j];
      all = g.defined() && g.layout() == at::kStrided && g.device() == devices[r] &&
            g.scalar_type() == first.scalar_type() && g.sizes() == first.sizes();
    }
    if (all) groups[first.scalar_type()].push_back(j);
  }
  return groups;
}

// `params` (of one dtype) in order, cut into runs of at most kChunkBytes (a larger parameter is
// a run of its own): the replicas' copies and the reduce go one run at a time, so a device
// holds one run's flat copy at once, not every gradient's (PyTorch's reduce_add_coalesced
// works in buffers of the same size).
std::vector<std::vector<size_t>> chunks_of(const std::vector<size_t>& params,
                                           const std::vector<at::Tensor>& first_replica) {
  constexpr int64_t kChunkBytes = 10 * 1024 * 1024;
  std::vector<std::vector<size_t>> chunks;
  int64_t bytes = 0;
  for (size_t j : params) {
    const auto& g = first_replica[j];
    const int64_t size = g.numel() * static_cast<int64_t>(g.element_size());
    if (chunks.empty() || bytes + size > kChunkBytes) {
      chunks.emplace_back();
      bytes = 0;
    }
    chunks.back().push_back(j);
    bytes += size;
  }
  return chunks;
}

}  // namespace
#endif

bool nccl_reduce_add(const std::vector<std::vector<at::Tensor>>& grads,
                     const std::vector<at::Device>& devices, std::vector<at::Tensor>& sums) {
#if DPX_WITH_CUDA
  if (devices.size() < 2 || grads.size() != devices.size() || !distinct_cuda_devices(devices)) {
    return false;
  }
  for (const auto& [dtype, params] : reducible_by_dtype(grads, devices)) {
    for (const auto& chunk : chunks_of(params, grads.front())) {
      std::vector<at::Tensor> flat(devices.size());
      for (size_t r = 0; r < devices.size(); ++r) {
        const c10::cuda::CUDAGuard guard(devices[r]);
        std::vector<at::Tensor> parts;
        for (size_t j : chunk) parts.push_back(grads[r][j].reshape({-1}));
        flat[r] = at::cat(parts);
      }
      at::Tensor total;
      {
        const c10::cuda::CUDAGuard guard(devices.front());
        total = at::empty_like(flat.front());
      }
      torch::cuda::nccl::reduce(flat, total, /*root=*/0);
      int64_t offset = 0;
      for (size_t j : chunk) {
        const auto& shape = grads.front()[j];
        sums[j] = total.narrow(0, offset, shape.numel()).view(shape.sizes());
        offset += shape.numel();
      }
    }
  }
  return true;
#else
  (void)grads, (void)devices, (void)sums;
  return false;
#endif
}

}  // namespace dpx::detail
