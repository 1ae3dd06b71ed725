#include "comm/init/factory.h"

#include <c10/util/Exception.h>

#include <optional>

#include "comm/backends/gloo/gloo_device.h"
#include "comm/backends/gloo/process_group_gloo.h"
#include "comm/backends/hierarchical/process_group_hierarchical.h"
#include "comm/backends/mpi/process_group_mpi.h"
#include "comm/backends/nccl/process_group_nccl.h"
#include "comm/backends/shm/process_group_shm.h"
#include "comm/backends/staged/process_group_staged.h"
#include "comm/plan/choose.h"
#include "comm/plan/members.h"
#include "dpx/errors.h"
#include "dpx/runtime/cuda.h"

namespace dpx::detail {

std::shared_ptr<ProcessGroup> make_group(Backend asked, const BackendArgs& args) {
  const at::Device device = args.options.device;
  const bool on_device = !device.is_cpu();
  TORCH_CHECK(device.is_cuda() || (device.is_cpu() && asked != Backend::kNccl),
              where(args.rank, args.size), "the ", to_string(asked), " backend on ", device, ": ",
              asked == Backend::kNccl ? "nccl works on CUDA devices only; give "
              "ProcessGroup::Options::device = cuda (or use shm or gloo on the CPU)" :
              "dpx runs groups on the CPU or on CUDA devices");
  BackendArgs host = args;
  host.options.device = at::kCPU;
  // MPI knows its ranks: no store round (the store may be null), and auto never picks it. On a
  // CUDA device a CUDA-aware MPI takes the tensors as they are (Note [CUDA-aware MPI] in
  // comm/backends/mpi/cuda_path.h); any other is staged.
  if (asked == Backend::kMpi) {
    if (on_device && mpi_takes_cuda_pointers(args)) return make_mpi_group(args);
    auto group = make_mpi_group(host);
    return on_device ? make_staged_group(std::move(group), args.options) : group;
  }
  // Where gloo would listen is this rank's own decision, and it can fail at once (a job over
  // several hosts whose master resolves to loopback here;
  // Note [Listen where the master is reached]). Made before the members round, which would wait
  // until the group's timeout for ranks such a job never connects.
  if (asked == Backend::kGloo) {
    choose_gloo_listen(gloo_listen_inputs(args.store.get()), where(args.rank, args.size));
  }
  check_members(*args.store, args.rank, args.size, args.options.timeout,
                where(args.rank, args.size));
  std::optional<Placement> placement;
  auto placed = [&]() -> const Placement& {
    if (!placement) {
      placement = gather_placement(*args.store, args.rank, args.size, device,
                                   args.options.timeout);
    }
    return *placement;
  };
  const Backend b = choose_backend(asked, on_device, cuda::built(), placed);
  if (b == Backend::kNccl) return make_nccl_group(args);
  std::shared_ptr<ProcessGroup> group;
  switch (b) {
    case Backend::kShm: group = make_shm_group(host); break;
    case Backend::kGloo: group = make_gloo_group(host); break;
    case Backend::kHierarchical: group = make_hierarchical_group(host, placed().hosts); break;
    case Backend::kHierarchicalMpi:  // shm inside each host, MPI between (and for the rest)
      group = make_hierarchical_group(host, placed().hosts, Backend::kMpi);
      break;
    default: TORCH_INTERNAL_ASSERT(false, "choose_backend gave ", to_string(b));
  }
  return on_device ? make_staged_group(std::move(group), args.options) : group;
}

}  // namespace dpx::detail
