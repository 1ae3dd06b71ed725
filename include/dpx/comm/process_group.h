// The process-group interface every backend implements (shm, gloo). The public calls check
// their arguments here, once for all backends, then hand over to the backend's do_* method.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <string>

#include "dpx/comm/types.h"
#include "dpx/comm/work.h"

namespace dpx {

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;
};

struct BroadcastOptions {
  int root = 0;
};

struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kSum;
};

class ProcessGroup {
 public:
  struct Options {
    std::chrono::milliseconds timeout = kDefaultTimeout;  // default for Work::wait()
    at::Device device = at::kCPU;                         // tensors must live here
  };

  ProcessGroup(int rank, int size, Options options);
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const Options& options() const { return options_; }
  virtual std::string backend() const = 0;

  // In place: every rank ends with the reduction of all ranks' `tensor`.
  std::shared_ptr<Work> allreduce(at::Tensor& tensor, AllreduceOptions opts = {});
  // In place: every rank ends with root's `tensor`.
  std::shared_ptr<Work> broadcast(at::Tensor& tensor, BroadcastOptions opts = {});
  // `output` holds size() * input.numel() elements; rank r's input lands in slice r.
  std::shared_ptr<Work> allgather(at::Tensor& output, const at::Tensor& input);
  // `input` holds size() * output.numel() elements; rank r gets the reduction of slice r.
  std::shared_ptr<Work> reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                       ReduceScatterOptions opts = {});
  std::shared_ptr<Work> barrier();

  // "[rank R/W host:pid] ", computed once (it costs a gethostname()).
  const std::string& where() const { return where_; }

 protected:
  virtual std::shared_ptr<Work> do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) = 0;
  virtual std::shared_ptr<Work> do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) = 0;
  virtual std::shared_ptr<Work> do_allgather(at::Tensor& output, const at::Tensor& input) = 0;
  virtual std::shared_ptr<Work> do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                                  const ReduceScatterOptions& opts) = 0;
  virtual std::shared_ptr<Work> do_barrier() = 0;

  // Throws "backend X does not support Y".
  [[noreturn]] void unsupported(const std::string& what) const;

 private:
  void check_tensor(const at::Tensor& t, const char* op, const char* name) const;

  int rank_;
  int size_;
  Options options_;
  std::string where_;
};

}  // namespace dpx
