// The process-group interface every backend implements (shm, gloo, nccl, staged, hierarchical;
// docs/backends.md). The public calls check their arguments here, once for all backends, then
// hand over to the backend's do_* method.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "dpx/comm/types.h"
#include "dpx/comm/work.h"

namespace dpx {

class Store;
namespace detail {
class StallInspector;
}

// Names the collectives this thread issues while it lives, for the stall inspector's log
// (DDP labels each bucket's all-reduce with the bucket and its parameters' names).
class CollectiveLabel {
 public:
  explicit CollectiveLabel(std::shared_ptr<const std::string> label);
  ~CollectiveLabel();
  CollectiveLabel(const CollectiveLabel&) = delete;
  CollectiveLabel& operator=(const CollectiveLabel&) = delete;

 private:
  std::shared_ptr<const std::string> previous_;
};

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
    // How long a collective may wait before this rank logs which ranks have not arrived
    // (Note [Stall inspector]); unset: DPX_STALL_CHECK_SECONDS, else 60 s. Zero: off.
    std::optional<std::chrono::milliseconds> stall_threshold;
  };

  ProcessGroup(int rank, int size, Options options);
  virtual ~ProcessGroup();
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

  // Starts the stall inspector (Note [Stall inspector]) on `store`, which every rank of this
  // group shares; new_process_group() does it. A no-op for one rank or a zero threshold.
  void start_stall_inspector(std::shared_ptr<Store> store);
  // Collectives issued on this group so far (the last one's sequence number).
  std::uint64_t collectives_issued() const { return seq_.load(std::memory_order_relaxed); }

 protected:
  // Stops the stall inspector, if it runs: once this returns, it asks no Work of this group
  // anything. A backend whose destructor tears down what its works need to answer (nccl: the
  // communicator their error checks read) calls it first, since the base's members, the
  // inspector among them, outlive the derived destructor's body.
  void stop_stall_inspector();

  virtual std::shared_ptr<Work> do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) = 0;
  virtual std::shared_ptr<Work> do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) = 0;
  virtual std::shared_ptr<Work> do_allgather(at::Tensor& output, const at::Tensor& input) = 0;
  virtual std::shared_ptr<Work> do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                                  const ReduceScatterOptions& opts) = 0;
  virtual std::shared_ptr<Work> do_barrier() = 0;

 private:
  void check_tensor(const at::Tensor& t, const char* op, const char* name) const;
  std::shared_ptr<Work> track(const char* op, const at::Tensor& t, std::shared_ptr<Work> work);

  int rank_;
  int size_;
  Options options_;
  std::string where_;
  std::atomic<std::uint64_t> seq_{0};
  std::unique_ptr<detail::StallInspector> inspector_;
};

}  // namespace dpx
