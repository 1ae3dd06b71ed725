// Element-wise reduction kernels: plain loops over blocks that fit in L1, which the compiler
// vectorises at -O3. bfloat16 and float16 accumulate in float32 and round once at the end.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "dpx/comm/types.h"

namespace dpx::detail::shm {

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrcs-1][i], always in this order so every
// rank computes the same bits; kAvg divides the sum by `world`. dst may be srcs[0] or srcs[1]
// (both are read at an element before it is written) but no later source.
void reduce(at::ScalarType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
            std::int64_t n, int world);

// reduce() of the `nparts` parts, written back into every one of them: block by block, each
// block is reduced into a private buffer first, so a part is read before it is overwritten.
void reduce_into_all(at::ScalarType dtype, ReduceOp op, void* const* parts, int nparts,
                     std::int64_t n, int world);

}  // namespace dpx::detail::shm
