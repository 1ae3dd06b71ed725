// Collectives on `options.device` tensors over `host`, a CPU group, through host buffers
// (Note [Staged collectives] in comm/backends/staged/process_group_staged.cpp).
#pragma once

#include <memory>

#include "dpx/comm/process_group.h"

namespace dpx::detail {

std::shared_ptr<ProcessGroup> make_staged_group(std::shared_ptr<ProcessGroup> host,
                                                ProcessGroup::Options options);

}  // namespace dpx::detail
