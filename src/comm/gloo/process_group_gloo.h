// The gloo backend: c10d's ProcessGroupGloo (TCP between hosts) behind dpx's interface.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "comm/backends.h"
#include "dpx/comm/process_group.h"

namespace dpx::detail {

class GlooGroup : public ProcessGroup {
 public:
  explicit GlooGroup(const BackendArgs& args);
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
  // With DPX_DEBUG=DETAIL: see consistency.h.
  void check(int op, const at::Tensor& t, int64_t extra);

  bool check_consistency_;

  std::shared_ptr<Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
};

}  // namespace dpx::detail
