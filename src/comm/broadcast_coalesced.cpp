#include "comm/broadcast_coalesced.h"

namespace dpx::detail {
namespace {

void broadcast_group(ProcessGroup& pg, const std::vector<at::Tensor>& group, int root) {
  std::vector<at::Tensor> flat;
  for (const auto& t : group) flat.push_back(t.detach().reshape({-1}));
  auto buffer = at::cat(flat);
  // Stream-ordered, as PyTorch's: the copies below queue after the broadcast on the current
  // stream, and the host waits only where the group has no device (Work::synchronize).
  pg.broadcast(buffer, {root})->synchronize();
  std::int64_t offset = 0;
  for (const auto& t : group) {
    t.detach().copy_(buffer.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

void broadcast_coalesced(ProcessGroup& pg, const std::vector<at::Tensor>& tensors, int root,
                         std::int64_t chunk_bytes) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> group;
  std::int64_t bytes = 0;
  for (const auto& t : tensors) {
    const std::int64_t tb = t.numel() * t.element_size();
    if (!group.empty() &&
        (t.scalar_type() != group.front().scalar_type() || bytes + tb > chunk_bytes)) {
      broadcast_group(pg, group, root);
      group.clear();
      bytes = 0;
    }
    group.push_back(t);
    bytes += tb;
  }
  if (!group.empty()) broadcast_group(pg, group, root);
}

}  // namespace dpx::detail
