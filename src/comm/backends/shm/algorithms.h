// The collectives of the shm backend, written against a Channel (channel.h).
//
// allreduce, small messages (one round, one post): every rank copies its tensor into its slot;
//   after the post every rank reduces all slots into its own tensor.
// allreduce, large messages (rounds of one slot each, two posts per round): the round's chunk is
//   cut into world slices. Each rank copies the slices it does not own into its slot; after the
//   first post it reduces its own slice from its tensor and the peers' slots into its slot; after
//   the second post it copies every slice's result from its owner's slot into its tensor. This
//   is reduce-scatter + all-gather; the double-buffered slots let ranks drift by a round.
// allreduce, shared (Note [Shared buckets] in comm/shared_memory.h): every rank's tensor lies at
//   the same place of its part of a shared segment. After the first post each rank reduces its
//   own slice from every rank's tensor and writes it into every rank's tensor; after the second
//   post each tensor holds the result. One round, nothing copied in or out.
// reduce_scatter: the large allreduce without its gather half (one post per round).
// broadcast, allgather: copy into the own slot, post, copy out of the slots that matter.
// Small all-reduces and broadcasts of up to kInlineBytes use the control line instead of the
//   slot (Note [Inline data] in segment.h).
#pragma once

#include <ATen/ATen.h>

#include "comm/backends/shm/channel.h"
#include "dpx/comm/types.h"

namespace dpx::detail::shm {

struct AlgorithmOptions {
  // allreduce messages up to this size take the one-post path.
  std::size_t small_bytes = 64 << 10;
  // allreduce results at least this large are written past the cache (copy.h).
  std::size_t streaming_bytes = 16 << 20;
  // one-post allreduces at least this large copy into the slot past the cache
  // (Note [Streaming copy-in] in algorithms.cpp).
  std::size_t streaming_in_bytes = 32 << 10;
};

void allreduce(Channel& ch, at::Tensor& tensor, ReduceOp op, const AlgorithmOptions& options);
// `offset`: the tensor's byte offset in this rank's part of `shared`, the same on every rank.
void allreduce_shared(Channel& ch, const Segment& shared, std::size_t offset, at::Tensor& tensor,
                      ReduceOp op);
void broadcast(Channel& ch, at::Tensor& tensor, int root);
void allgather(Channel& ch, at::Tensor& output, const at::Tensor& input);
void reduce_scatter(Channel& ch, at::Tensor& output, const at::Tensor& input, ReduceOp op);
void barrier(Channel& ch);

}  // namespace dpx::detail::shm
