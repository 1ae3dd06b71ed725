// Copies that bypass the cache: for results far larger than the last-level cache, the
// destination would only evict the slots the next round needs, and ordinary stores read each
// destination line from memory before overwriting it.
#pragma once

#include <cstddef>

namespace dpx::detail::shm {

// Like memcpy; the written lines are not kept in cache. Visible to other threads on return.
void copy_streaming(void* dst, const void* src, std::size_t n);

}  // namespace dpx::detail::shm
