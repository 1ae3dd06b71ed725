// c10::Allocator across LibTorch versions: from 2.3 on, allocate() is no longer const and
// copy_data() (used by Storage clones) must be defined. dpx's allocators derive from this class
// and implement allocate_block() alone.
#pragma once

#include <cstddef>

#include <c10/core/Allocator.h>

#include "runtime/compat/torch_version.h"

namespace dpx::compat {

class Allocator : public c10::Allocator {
 public:
  virtual c10::DataPtr allocate_block(std::size_t n) const = 0;

#if DPX_TORCH_AT_LEAST(2, 3)
  c10::DataPtr allocate(std::size_t n) override { return allocate_block(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(std::size_t n) const override { return allocate_block(n); }
#endif
};

}  // namespace dpx::compat
