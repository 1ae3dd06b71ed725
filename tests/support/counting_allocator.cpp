#include "support/counting_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <memory>

namespace dpx::test {
namespace {

struct Block {
  c10::DataPtr inner;
  std::size_t bytes;
  CountingAllocator* owner;
};

CountingAllocator* g_instance = nullptr;

}  // namespace

CountingAllocator& CountingAllocator::install() {
  TORCH_CHECK(g_instance == nullptr, "CountingAllocator::install: installed already");
  g_instance = new CountingAllocator(c10::GetCPUAllocator());  // lives as long as its tensors
  c10::SetCPUAllocator(g_instance, /*priority=*/100);  // above dpx's cache
  return *g_instance;
}

c10::DataPtr CountingAllocator::allocate_block(std::size_t n) const {
  const std::size_t limit = limit_.load();
  const std::size_t now = live_.fetch_add(n) + n;
  if (limit != 0 && now > limit) {
    live_.fetch_sub(n);
    TORCH_CHECK(false, "CPU out of memory: allocating ", n, " bytes would bring this process's "
                "tensors to ", now, " bytes, over its limit of ", limit, " bytes");
  }
  std::size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  auto* block = new Block{inner_->allocate(n), n,
                          const_cast<CountingAllocator*>(this)};
  void* data = block->inner.get();
  return c10::DataPtr(data, block, &CountingAllocator::release, c10::Device(c10::kCPU));
}

void CountingAllocator::release(void* context) {
  std::unique_ptr<Block> block(static_cast<Block*>(context));
  block->owner->live_.fetch_sub(block->bytes);
}

}  // namespace dpx::test
