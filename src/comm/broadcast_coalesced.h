// The coalesced broadcast of many tensors from one rank, as PyTorch's _broadcast_coalesced: what
// DDP sends its parameters and buffers with and ZeRO each rank's updated shard.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "dpx/comm/process_group.h"

namespace dpx::detail {

// PyTorch's cap of one coalesced broadcast.
constexpr std::int64_t kBroadcastChunkBytes = 250 * 1024 * 1024;

// Overwrites `tensors` with root's, flattening same-dtype runs into chunks of up to
// kBroadcastChunkBytes so that a model costs a few collectives, not one per tensor. On a device
// group the host does not wait for the broadcasts (Work::synchronize): what the calling thread
// queues next on its current stream sees root's values.
void broadcast_coalesced(ProcessGroup& pg, const std::vector<at::Tensor>& tensors, int root = 0,
                         std::int64_t chunk_bytes = kBroadcastChunkBytes);

}  // namespace dpx::detail
