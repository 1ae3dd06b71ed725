// Construction-time collectives of DDP: the cross-rank model check and the coalesced broadcast
// of parameters and buffers.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "dpx/comm/process_group.h"

namespace dpx::detail {

// PyTorch's cap of one coalesced broadcast.
constexpr std::int64_t kBroadcastChunkBytes = 250 * 1024 * 1024;

// Every rank fails alike when ranks hold a different number of parameters ("DDP expects same
// model across all ranks") or a parameter's sizes/strides differ from rank 0's ("appears not to
// match").
void verify_params_across_ranks(ProcessGroup& pg, const std::vector<at::Tensor>& params);

// Overwrites `tensors` with root's, flattening same-dtype runs into chunks of up to
// kBroadcastChunkBytes so that a model costs a few collectives, not one per tensor. On a device
// group the host does not wait for the broadcasts (Work::synchronize): what the calling thread
// queues next on its current stream sees root's values.
void broadcast_coalesced(ProcessGroup& pg, const std::vector<at::Tensor>& tensors, int root = 0,
                         std::int64_t chunk_bytes = kBroadcastChunkBytes);

}  // namespace dpx::detail
