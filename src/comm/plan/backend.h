// The backends a group can be asked for, named once: every name a user writes (InitOptions,
// new_process_group, DPX_BACKEND) is parsed here, and everything after works on the enum.
#pragma once

#include <string>

namespace dpx::detail {

enum class Backend { kAuto, kShm, kGloo, kNccl, kHierarchical, kMpi, kHierarchicalMpi };

// "auto", "shm", "gloo", "nccl", "hierarchical", "mpi", "hierarchical-mpi"; anything else is an
// error that lists them.
Backend parse_backend(const std::string& name);

// What was asked: `name`, or DPX_BACKEND when `name` is "auto" and the variable is set.
Backend requested_backend(const std::string& name);

const char* to_string(Backend b);

}  // namespace dpx::detail
