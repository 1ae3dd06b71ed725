// Note [Scratch reuse] in scratch.h.
#include "comm/backends/mpi/scratch.h"

#include <algorithm>
#include <utility>

namespace dpx::detail::mpi {

at::Tensor ScratchPool::take(std::size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The smallest kept buffer that fits, so a large one stays for a large call.
    std::size_t best = kept_.size();
    for (std::size_t i = 0; i < kept_.size(); ++i) {
      if (kept_[i].nbytes() >= bytes &&
          (best == kept_.size() || kept_[i].nbytes() < kept_[best].nbytes())) {
        best = i;
      }
    }
    if (best != kept_.size()) {
      at::Tensor out = std::move(kept_[best]);
      kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(best));
      return out;
    }
  }
  return at::empty({static_cast<std::int64_t>(bytes)}, at::kByte);
}

void ScratchPool::give(at::Tensor buffer) {
  if (!buffer.defined() || buffer.nbytes() > kKeptBytes) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (kept_.size() < kKept) {
    kept_.push_back(std::move(buffer));
    return;
  }
  auto smallest = std::min_element(kept_.begin(), kept_.end(), [](const auto& a, const auto& b) {
    return a.nbytes() < b.nbytes();
  });
  // Swapped, the one let go is freed with `buffer`, after the lock.
  if (smallest->nbytes() < buffer.nbytes()) std::swap(*smallest, buffer);
}

std::size_t ScratchPool::kept() {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_.size();
}

}  // namespace dpx::detail::mpi
