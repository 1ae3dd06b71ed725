#include "comm/plan/backend.h"

#include <c10/util/Exception.h>

#include "runtime/env_read.h"

namespace dpx::detail {

Backend parse_backend(const std::string& name) {
  for (Backend b : {Backend::kAuto, Backend::kShm, Backend::kGloo, Backend::kNccl,
                    Backend::kHierarchical, Backend::kMpi, Backend::kHierarchicalMpi}) {
    if (name == to_string(b)) return b;
  }
  TORCH_CHECK(false, "unknown backend '", name,
              "'; use auto, shm, gloo, hierarchical, nccl, mpi or hierarchical-mpi");
}

Backend requested_backend(const std::string& name) {
  if (name == "auto") return parse_backend(env_string("DPX_BACKEND").value_or("auto"));
  return parse_backend(name);
}

const char* to_string(Backend b) {
  switch (b) {
    case Backend::kAuto: return "auto";
    case Backend::kShm: return "shm";
    case Backend::kGloo: return "gloo";
    case Backend::kNccl: return "nccl";
    case Backend::kHierarchical: return "hierarchical";
    case Backend::kMpi: return "mpi";
    case Backend::kHierarchicalMpi: return "hierarchical-mpi";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown Backend");
}

}  // namespace dpx::detail
