#include "comm/plan/choose.h"

namespace dpx::detail {

Backend choose_backend(Backend asked, bool on_device, bool nccl_built,
                       const std::function<const Placement&()>& placement) {
  if (asked != Backend::kAuto) return asked;
  const Placement& p = placement();
  if (on_device && nccl_built && !p.device_shared) return Backend::kNccl;
  if (p.hosts.hosts() == 1) return Backend::kShm;
  return !on_device && p.hosts.shares_a_host() ? Backend::kHierarchical : Backend::kGloo;
}

}  // namespace dpx::detail
