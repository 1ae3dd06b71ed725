// Which data path an mpi all-reduce of a CPU tensor takes, by its bytes alone: a pair exchange,
// a ring, or MPI's own all-reduce (Note [Ring all-reduce] and Note [Pair exchange] in ring.h).
// No MPI header here: the unit tests pin every bound (tests/unit/mpi_sizes_test.cpp).
#pragma once

#include <cstdint>

#include "dpx/comm/types.h"

namespace dpx::detail::mpi {

// An all-reduce that does not block runs as a ring from kRingBytesTwoRanks up with 2 ranks, and
// where each rank's chunk is kRingChunkBytes or more with more ranks.
constexpr std::int64_t kRingBytesTwoRanks = 4 * 1024;
constexpr std::int64_t kRingChunkBytes = 32 * 1024;

// From kPairBytesFrom to below kPairBytesBelow, and from 1 byte to kPairSmallBytes, with 2 ranks
// (Note [Pair exchange]).
constexpr std::int64_t kPairSmallBytes = 2 * 1024;
constexpr std::int64_t kPairBytesFrom = 8 * 1024;
constexpr std::int64_t kPairBytesBelow = 128 * 1024;

// Whether an all-reduce of `bytes` by `op` in a group of `size` ranks is a pair exchange.
bool pair_sizes(std::int64_t bytes, int size, ReduceOp op);

// Whether one of `bytes` in a group of `size` ranks runs as a ring, MPI_TAG_UB (`tag_ub`)
// leaving room for its rounds' tags (round_stride, Note [Group epochs] in tags.h).
bool ring_sizes(std::int64_t bytes, int size, int tag_ub);

}  // namespace dpx::detail::mpi
