// Construction-time collectives of DDP: the cross-rank model check (the parameters and buffers
// are then broadcast with comm/broadcast_coalesced.h).
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "dpx/comm/process_group.h"

namespace dpx::detail {

// Every rank fails alike when ranks hold a different number of parameters ("DDP expects same
// model across all ranks") or a parameter's sizes/strides differ from rank 0's ("appears not to
// match").
void verify_params_across_ranks(ProcessGroup& pg, const std::vector<at::Tensor>& params);

}  // namespace dpx::detail
