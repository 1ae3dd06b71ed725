// An all-reduce of dpx's own over MPI's non-blocking point-to-point messages. Included only by
// the mpi backend's files, inside #if DPX_WITH_MPI.
//
// Note [Ring all-reduce]
// OpenMPI 4.1's non-blocking all-reduce (libnbc, MPI_Iallreduce) costs up to 3x its blocking
// one on one host, from 16 KiB up (docs/performance.md, "The mpi backend's data step"), and the
// blocking one cannot be bounded by a timeout (Note [Blocking data step] in collective.h). So a
// large all-reduce whose data step does not block is a ring of MPI_Isend and MPI_Irecv instead,
// polled like any other request:
//  1. The tensor is cut into p chunks (p ranks). In rounds 0 .. p-2, rank r sends chunk r - k
//     to rank r + 1 and receives chunk r - k - 1 from rank r - 1 into a scratch buffer, which
//     it then reduces into its own chunk (MPI_Reduce_local with the collective's MPI_Op, so
//     every dtype and op of MPI's collective, float16's and bfloat16's user ops included).
//     After them, rank r holds chunk r + 1 reduced over every rank.
//  2. In rounds p-1 .. 2p-3 the reduced chunks go round once more, each received straight
//     into its place.
// Each chunk is reduced by one rank in one order and then copied, so every rank ends with the
// same bits (MPI's collectives promise that too). Each rank sends and receives 2(p-1)/p of the
// tensor, the least an all-reduce can.
// Segments: a chunk over 1 MiB moves in segments of at most 1 MiB (where MPI_TAG_UB leaves tags
// for that many rounds: 32767, the least MPI allows, leaves 15 at 2 ranks), one a round, each
// reduced from a scratch of one segment while it is still in cache (a chunk-sized scratch was a
// second pass over memory, and with the system allocator a fresh mapping of half the tensor
// every call). From 2 MiB up with DPX_MALLOC=system: 0.53-0.87x of the unsegmented ring's time
// (docs/performance.md, "The ring in segments"). Every round of a collective has a tag of its
// own, and collectives of different sizes have different numbers of rounds, so each collective
// owns a fixed stride of tags (round_stride in tags.h).
// Each round's messages carry a tag of their own, from the collective's number and the round:
// a rank may start the next collective's first round while its neighbour is still in this
// one's, and messages of one tag would then match the wrong receive (MPI orders them per tag).
// The data communicator carries only collectives and these rounds (MPI keeps point-to-point
// traffic apart from its collectives' on one communicator).
// How large: a ring takes 2(p-1) rounds, each a message's latency, where MPI's own algorithms
// for small messages take about log2(p); so it runs only where each rank's chunk is large
// enough for bandwidth to rule (kRingChunkBytes). With 2 ranks the ring takes two rounds where
// MPI's recursive doubling takes one, and still beat libnbc from 4 KiB up on one host (1.46x
// against 3.68x raw MPI_Allreduce's time at 4 KiB, 1.14x against 1.63x at 16 KiB;
// docs/performance.md); a 2-rank sum from 8 KiB to below 128 KiB now takes one round instead
// (Note [Pair exchange]), as does one of up to 2 KiB in place of MPI_Iallreduce. With more
// ranks this machine (2 cores) could only run them oversubscribed, where times swung 10x between
// runs, so the per-chunk bound there is a conservative choice, not a measured crossover.
//
// Note [Pair exchange]
// With 2 ranks the ring's two rounds move the same bytes as one exchange of the whole tensor,
// at twice the latency: from kPairBytesFrom to below kPairBytesBelow a sum is one round instead
// (and up to kPairSmallBytes, below; the bounds: sizes.h). Each rank sends its tensor and
// receives the peer's into a scratch buffer (MPI_Isend, MPI_Irecv), then adds it into its own
// (MPI_Reduce_local). The ranks add the same two numbers in opposite operand order; IEEE
// addition gives the same result either way, so both ranks hold the same values, and the same bits except where both operands
// are NaN (x86 then keeps the first operand's NaN: a NaN's sign or payload can differ between
// the ranks; both hold a NaN). Max and min differ by operand order for a NaN against a number,
// so only SUM and AVG take this path (a product's rounding does not depend on operand order
// either, but its gain was not measured: it keeps the ring). Ordering the operands by rank
// instead would cost one rank a copy of the tensor, about what the saved round gains.
// Measured against the ring in raw MPI on one host, OpenMPI 4.1's shared-memory transport
// (bench/mpi/pair_mpi.cpp): 0.63-0.66x its time at 8 KiB, 0.76x at 16 KiB, 0.94x at 64 KiB,
// 0.98-0.99x at 96 KiB, 0.95-1.00x at 128 KiB (docs/performance.md, "The pair exchange"). From
// 4 to below 8 KiB the ring's halves go as eager messages and the pair's whole tensor does not:
// the ring stays there. Up to kPairSmallBytes (2 KiB) the whole tensor is one eager message too,
// and the pair replaces libnbc's MPI_Iallreduce, whose schedule was about a third of a small
// call's time: 0.67-0.75x dpx's time from 4 B to 2 KiB (docs/performance.md, "Scratch reuse,
// and the pair exchange for small sums"). Above 2 KiB and below 4 KiB, MPI_Iallreduce as before
// (not measured: the transport's eager limit counts its header, so a whole tensor near 4 KiB
// may not go eagerly).
#pragma once

#include <ATen/ATen.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/backends/mpi/collective.h"
#include "comm/backends/mpi/scratch.h"
#include "comm/backends/mpi/sizes.h"
#include "dpx/comm/types.h"

namespace dpx::detail::mpi {

// Whether an all-reduce of `tensor` by `op` in a group of `size` ranks is a pair exchange (a CPU
// tensor of pair_sizes), and sets `step`'s one round and its finish (the sum) to it
// (Note [Pair exchange]).
bool use_pair(const at::Tensor& tensor, int size, ReduceOp op);
void add_pair(DataStep& step, const at::Tensor& tensor, MPI_Datatype type, MPI_Op mpi_op,
              int rank, std::shared_ptr<ScratchPool> pool);

// Whether an all-reduce of `tensor` in a group of `size` ranks runs as a ring: a CPU tensor of
// ring_sizes (sizes.h).
bool use_ring(const at::Tensor& tensor, int size, int tag_ub);

// Sets `step`'s rounds to the ring's, all-reducing `tensor` (contiguous) by `op`; `tag_ub` bounds
// its segments (MPI_TAG_UB). Both take their scratch from `pool` (Note [Scratch reuse]).
void add_ring(DataStep& step, const at::Tensor& tensor, MPI_Datatype type, MPI_Op op, int rank,
              int size, int tag_ub, std::shared_ptr<ScratchPool> pool);

}  // namespace dpx::detail::mpi
