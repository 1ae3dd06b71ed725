#include "comm/gloo/process_group_gloo.h"

#include <cstdlib>

#include "comm/gloo/consistency.h"
#include "comm/gloo/translate.h"
#include "dpx/comm/errors.h"
#include "dpx/env.h"
#include "env_read.h"

namespace dpx::detail {
namespace {

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // Gloo has no average: callers pre-divide and sum
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kProduct: return c10d::ReduceOp::PRODUCT;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown ReduceOp");
}

// Which local address Gloo listens on. GLOO_SOCKET_IFNAME wins (as in PyTorch); a loopback
// master means a single-host job; otherwise the address this host's name resolves to.
std::shared_ptr<::gloo::transport::Device> make_device() {
  if (auto ifname = env_string("GLOO_SOCKET_IFNAME")) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(*ifname);
  }
  const std::string addr = env_string("MASTER_ADDR").value_or("127.0.0.1");
  if (addr == "localhost" || addr.rfind("127.", 0) == 0) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

class GlooWork : public Work {
 public:
  GlooWork(c10::intrusive_ptr<c10d::Work> work, std::chrono::milliseconds timeout,
           std::string where, const char* op)
      : Work(timeout), work_(std::move(work)), where_(std::move(where)), op_(op) {}

  void wait(std::chrono::milliseconds timeout) override {
    try {
      work_->wait(timeout);
    } catch (const std::exception& e) {
      rethrow_gloo_error(e, where_, op_, timeout);
    }
  }
  bool is_completed() override { return work_->isCompleted(); }
  std::exception_ptr exception() override { return work_->exception(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string where_;
  const char* op_;
};

}  // namespace

GlooGroup::GlooGroup(const BackendArgs& args)
    : ProcessGroup(args.rank, args.size, args.options),
      check_consistency_(debug_level() == DebugLevel::kDetail),
      store_(args.store) {
  TORCH_CHECK(args.options.device.is_cpu(), where(), "the gloo backend of dpx works on CPU "
              "tensors only, not ", args.options.device);
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->timeout = args.options.timeout;
  opts->devices.push_back(make_device());
  try {
    pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_->c10d_store(), args.rank, args.size,
                                                      opts);
  } catch (const std::exception& e) {
    rethrow_gloo_error(e, where(), "connect to the other ranks", args.options.timeout);
  }
}

void GlooGroup::check(int op, const at::Tensor& t, int64_t extra) {
  if (check_consistency_ && size() > 1) {
    Fingerprint f{op, static_cast<int64_t>(t.scalar_type()), t.numel(), extra};
    check_consistency(*pg_, f, rank(), size(), where());
  }
}

std::shared_ptr<Work> GlooGroup::wrap(c10::intrusive_ptr<c10d::Work> work, const char* op) {
  return std::make_shared<GlooWork>(std::move(work), options().timeout, where(), op);
}

// Gloo in LibTorch 1.13 has no bfloat16. Moving data (broadcast, allgather) views the bits as
// float16; reductions go through a float32 copy, synchronously (the shm backend is the fast path).
static at::Tensor bits_as_half(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t;
}

std::shared_ptr<Work> GlooGroup::launch_allreduce(at::Tensor& tensor, ReduceOp op) {
  if (tensor.scalar_type() == at::kBFloat16) {
    auto wide = tensor.to(at::kFloat);
    launch_allreduce(wide, op)->wait();
    tensor.copy_(wide);
    auto done = std::make_shared<CompletionWork>(options().timeout, where());
    done->complete();
    return done;
  }
  if (op == ReduceOp::kAvg) {
    tensor.div_(size());
  }
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions o;
  o.reduceOp = to_c10d(op);
  return wrap(pg_->allreduce(tensors, o), "allreduce");
}

std::shared_ptr<Work> GlooGroup::do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) {
  check(0, tensor, static_cast<int64_t>(opts.op));
  return launch_allreduce(tensor, opts.op);
}

std::shared_ptr<Work> GlooGroup::do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) {
  check(1, tensor, opts.root);
  std::vector<at::Tensor> tensors{bits_as_half(tensor)};
  c10d::BroadcastOptions o;
  o.rootRank = opts.root;
  return wrap(pg_->broadcast(tensors, o), "broadcast");
}

std::shared_ptr<Work> GlooGroup::do_allgather(at::Tensor& output, const at::Tensor& input) {
  check(2, input, 0);
  // Gloo's allgather writes into a list of tensors: views of `output`, one per rank.
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (const auto& chunk : output.view({-1}).chunk(size())) {
    outputs[0].push_back(bits_as_half(chunk.view(input.sizes())));
  }
  std::vector<at::Tensor> inputs{bits_as_half(input)};
  return wrap(pg_->allgather(outputs, inputs), "allgather");
}

std::shared_ptr<Work> GlooGroup::do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                                   const ReduceScatterOptions& opts) {
  check(3, input, static_cast<int64_t>(opts.op));
  // ProcessGroupGloo has no reduce_scatter: all-reduce a copy of the input and keep our slice.
  // Twice the traffic of a real reduce-scatter; the shm backend is the fast path on one host.
  auto full = input.clone();
  launch_allreduce(full, opts.op)->wait();
  const auto n = output.numel();
  output.view({-1}).copy_(full.view({-1}).narrow(0, rank() * n, n));
  auto done = std::make_shared<CompletionWork>(options().timeout, where());
  done->complete();
  return done;
}

std::shared_ptr<Work> GlooGroup::do_barrier() {
  check(4, at::empty({0}), 0);
  return wrap(pg_->barrier(), "barrier");
}

std::shared_ptr<ProcessGroup> make_gloo_group(const BackendArgs& args) {
  return std::make_shared<GlooGroup>(args);
}

}  // namespace dpx::detail
