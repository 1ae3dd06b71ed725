// DDP's buckets in memory that every rank of an mpi group on one host maps. Included only by the
// mpi backend's files, inside #if DPX_WITH_MPI.
//
// Note [Shared buckets over MPI]
// On one host, the ring (Note [Ring all-reduce] in ring.h) leaves the copying to MPI: OpenMPI
// moves each segment by a kernel copy (CMA) into a scratch buffer, and dpx reduces it from
// there. The shm backend instead keeps DDP's buckets in memory every rank maps and reduces them
// in place (Note [Shared buckets] in comm/shared_memory.h): DDP's largest bucket of the 24 M MLP
// (64 MiB) took 1.5-3x as long over mpi, and was most of what the MLP left exposed after
// backward. So an mpi group whose ranks all run on one host (Note [What a host is] in
// runtime.h, and one pid namespace) gives DDP such memory too:
//  1. allocate_shared (collective), by three all-gathers over the group itself: first every
//     rank's host, pid namespace and wish (DPX_MPI_SHARED_BUCKETS); unless every rank is on
//     rank 0's host, in its pid namespace, and none set 0, every rank returns no memory (DDP
//     keeps private buckets), and nothing was made (across hosts, mpi's main use, rank 0 would
//     otherwise reserve world x the gradients' bytes for nothing). Else rank 0 makes a memory
//     file of `size` copies, each rounded to a page, reserves and maps it, and the second
//     publishes its pid and descriptor; the others open the file through /proc/<pid>/fd/<fd>
//     and map it, and the third tells every rank whether all did. If one could not, every rank
//     returns no memory, and the failing rank and rank 0 warn why (a speed-up on by default
//     must not end a job the private path runs), unless a rank set 1: then all raise the same
//     error. Rank 0 closes the file then; the mappings keep the memory until the last tensor
//     on it goes. Every rank numbers the blocks it got in order, alike (all get one or none).
//  2. An all-reduce of a tensor lying in that memory (found by address; the block's number and
//     the offset, in 64-byte lines, are in the descriptor, so a rank whose tensor lies
//     elsewhere, in another block too, raises MismatchError) is a data step of rounds
//     (DataStep::round) on the MPI thread. The descriptors' exchange comes first
//     (Note [MPI collective steps], step 1): every rank has issued the all-reduce, so its
//     bucket is written. Then rank r reduces slice r of the tensor, reading every rank's copy in
//     place into rank 0's (in rank order: MPI_Reduce_local with the collective's MPI_Op, so
//     every dtype and op the ring takes), and copies the result into every other rank's copy:
//     one round per segment (about 1 MiB of all the copies together), with no message, so the
//     thread polls other collectives between them. Last, a dissemination barrier
//     (ceil(log2 size) rounds of one empty message to rank r + 2^i and one from r - 2^i): once
//     it completes, every rank has written its slice into this rank's copy and read what it
//     needed from it, and the Work completes.
// Each slice is reduced by one rank and copied, so every rank ends with the same bits. A rank
// that dies or stops in the middle leaves its peers in the barrier until the group's timeout,
// as in the ring. With DPX_MPI_BLOCKING=1 and every rank idle, the data step is MPI's blocking
// all-reduce of each rank's own copy instead, which is correct in that memory too.
#pragma once

#include <ATen/ATen.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/backends/mpi/collective.h"

namespace dpx::detail::mpi {

// A memory file every rank of a group maps: rank r's copy starts at base + r * stride.
class SharedBlock {
 public:
  SharedBlock(char* base, std::size_t stride, int size)
      : base_(base), stride_(stride), size_(size) {}
  ~SharedBlock();
  SharedBlock(const SharedBlock&) = delete;
  SharedBlock& operator=(const SharedBlock&) = delete;
  char* copy(int rank) const { return base_ + stride_ * static_cast<std::size_t>(rank); }
  std::size_t stride() const { return stride_; }

 private:
  char* base_;
  std::size_t stride_;
  int size_;
};

// All-gathers `mine` (int64 values, the same count on every rank) over the group; returns
// every rank's, rank by rank.
using GatherInts = std::function<std::vector<std::int64_t>(const std::vector<std::int64_t>&)>;

// DPX_MPI_SHARED_BUCKETS on this rank: 0, unset, 1.
enum class Wish { kOff = 0, kDefault = 1, kRequired = 2 };

// Step 1 of Note [Shared buckets over MPI]: a block of `bytes` per rank, or null on every rank
// where the group keeps none (not one host, a rank's wish is kOff, or a rank could not make or
// map it: warned). Collective. Throws DistributedError on every rank when one could not make or
// map it and a rank's wish is kRequired. `where` starts errors.
std::shared_ptr<SharedBlock> make_shared_block(std::size_t bytes, int rank, int size,
                                               std::uint64_t host, Wish wish,
                                               const GatherInts& gather, const std::string& where);

// Step 2: sets `step`'s rounds to the all-reduce of `tensor`, which lies `offset` bytes into this
// rank's copy of `block`, by `op`; `tag_ub` bounds its rounds (MPI_TAG_UB).
void add_shared_allreduce(DataStep& step, std::shared_ptr<SharedBlock> block, std::size_t offset,
                          const at::Tensor& tensor, MPI_Datatype type, MPI_Op op, int rank,
                          int size, int tag_ub);

}  // namespace dpx::detail::mpi
