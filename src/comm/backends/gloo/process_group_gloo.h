// The gloo backend: c10d's ProcessGroupGloo (TCP between hosts) behind dpx's interface.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "comm/backends/backend_args.h"
#include "comm/coordination/consistency.h"
#include "comm/coordination/issuer.h"
#include "dpx/comm/process_group.h"

namespace dpx::detail {

class GlooGroup : public ProcessGroup {
 public:
  explicit GlooGroup(const BackendArgs& args);
  ~GlooGroup() override;
  std::string backend() const override { return "gloo"; }

 protected:
  std::shared_ptr<Work> do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) override;
  std::shared_ptr<Work> do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) override;
  std::shared_ptr<Work> do_allgather(at::Tensor& output, const at::Tensor& input) override;
  std::shared_ptr<Work> do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                          const ReduceScatterOptions& opts) override;
  std::shared_ptr<Work> do_barrier() override;

 private:
  std::shared_ptr<Work> wrap(c10::intrusive_ptr<c10d::Work> work, const char* op);
  // Average and bfloat16, which Gloo lacks, on top of its sum and float32.
  std::shared_ptr<Work> launch_allreduce(at::Tensor& tensor, ReduceOp op);
  // Queues `launch` behind a check of `desc` across ranks (Note [Checked issue]).
  std::shared_ptr<Work> issue(const CollectiveDescriptor& desc, Issuer::Launch launch);
  // Note [Consistency] in comm/coordination/consistency.h; on the issuer thread.
  void check(CollectiveDescriptor mine);

  std::uint32_t seq_ = 0;  // collectives issued on this group; issuer thread only

  std::shared_ptr<Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::unique_ptr<Issuer> issuer_;  // with more than one rank
};

std::shared_ptr<ProcessGroup> make_gloo_group(const BackendArgs& args);

}  // namespace dpx::detail
