#include "comm/backends/gloo/process_group_gloo.h"

#include <atomic>
#include <cstring>

#include "comm/backends/c10d/c10d_work.h"
#include "comm/coordination/consistency.h"
#include "comm/backends/gloo/gloo_device.h"
#include "comm/backends/gloo/translate.h"
#include "store/c10d_adapter.h"
#include "store/round.h"
#include "dpx/errors.h"
#include "dpx/observe/timeline.h"
#include "runtime/env_read.h"

namespace dpx::detail {
namespace {

c10d::ReduceOp gloo_op(ReduceOp op) {
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

class GlooWork : public C10dWork {
 public:
  GlooWork(c10::intrusive_ptr<c10d::Work> work, std::chrono::milliseconds timeout,
           std::string where, const char* op)
      : C10dWork(std::move(work), rethrow_gloo_error, timeout, std::move(where), op) {
    if (timeline::enabled()) note_finish();
  }

  std::chrono::steady_clock::time_point finished_at() override {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(finished_ns_->load()));
  }

 private:
  // The timeline shows when Gloo finished, not when someone waited: c10d's future tells.
  void note_finish() {
    try {
      work_->getFuture()->addCallback([done = finished_ns_](c10::ivalue::Future&) {
        done->store(std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::steady_clock::now().time_since_epoch()).count());
      });
    } catch (const std::exception&) {
      // A c10d work without a future: the timeline falls back to the end of the wait.
    }
  }

  std::shared_ptr<std::atomic<std::int64_t>> finished_ns_ =
      std::make_shared<std::atomic<std::int64_t>>(0);
};

}  // namespace

GlooGroup::GlooGroup(const BackendArgs& args)
    : ProcessGroup(args.rank, args.size, args.options),
      store_(args.store) {
  TORCH_CHECK(args.options.device.is_cpu(), where(), "the gloo backend of dpx works on CPU "
              "tensors only, not ", args.options.device);
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->timeout = args.options.timeout;
  // Note [Listen where the master is reached] in comm/backends/gloo/gloo_device.h.
  const GlooListen listen = choose_gloo_listen(gloo_listen_inputs(store_.get()), where());
  opts->devices.push_back(make_gloo_device(listen));
  check_settings_agree(*store_, rank(), size(), {{"backend", "gloo"}}, options().timeout, where());
  try {
    pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(c10d_group_store(store_, "gloo", rank()),
                                                      args.rank, args.size, opts);
  } catch (const std::exception& e) {
    rethrow_gloo_error(e, where(), "connect to the other ranks", args.options.timeout);
  }
  // Gloo's connect can finish on one rank while a peer is still reading that rank's side of
  // the handshake; a rank that then had nothing to do and left closed its sockets under the
  // peer, whose connect failed with "peer closed its connection". No rank leaves the
  // constructor before every rank is connected.
  store_all_gather(*store_, "gloo-connected", rank(), size(), "", options().timeout);
  if (size() > 1) issuer_ = std::make_unique<Issuer>(options().timeout, where());
}

// Stops the issuer before pg_, which its thread uses, goes.
GlooGroup::~GlooGroup() { issuer_.reset(); }

// Note [Consistency] step 2, by default: Gloo aborts the process on a size mismatch, mixes
// bytes on a dtype mismatch of equal width and waits out the timeout on an op mismatch, so the
// descriptors are compared before Gloo sees the data: one small allgather per collective, on
// the issuer thread (Note [Checked issue] in issuer.h).
void GlooGroup::check(CollectiveDescriptor mine) {
  mine.seq = seq_++;
  constexpr int64_t kWords = sizeof(CollectiveDescriptor) / sizeof(int64_t);
  auto own = at::empty({kWords}, at::kLong);
  std::memcpy(own.data_ptr(), &mine, sizeof(mine));
  auto all = at::empty({size(), kWords}, at::kLong);
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < size(); ++r) out[0].push_back(all[r]);
  std::vector<at::Tensor> in{own};
  try {
    pg_->allgather(out, in)->wait(options().timeout);
  } catch (const std::exception& e) {
    rethrow_gloo_error(e, where(), to_string(mine.kind), options().timeout);
  }
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    CollectiveDescriptor theirs;
    std::memcpy(&theirs, all[r].data_ptr(), sizeof(theirs));
    check_same(mine, theirs, r, where(), "gloo");
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
  o.reduceOp = gloo_op(op);
  return wrap(pg_->allreduce(tensors, o), "allreduce");
}

std::shared_ptr<Work> GlooGroup::issue(const CollectiveDescriptor& desc, Issuer::Launch launch) {
  if (!issuer_) return launch();  // one rank: nobody to disagree with
  return issuer_->submit([this, desc, launch = std::move(launch)] {
    check(desc);
    return launch();
  });
}

std::shared_ptr<Work> GlooGroup::do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) {
  return issue(describe_call(CollectiveKind::kAllreduce, tensor, static_cast<int>(opts.op)),
               [this, t = tensor, op = opts.op]() mutable { return launch_allreduce(t, op); });
}

std::shared_ptr<Work> GlooGroup::do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) {
  return issue(describe_call(CollectiveKind::kBroadcast, tensor, 0, opts.root),
               [this, t = tensor, root = opts.root] {
                 std::vector<at::Tensor> tensors{bits_as_half(t)};
                 c10d::BroadcastOptions o;
                 o.rootRank = root;
                 return wrap(pg_->broadcast(tensors, o), "broadcast");
               });
}

std::shared_ptr<Work> GlooGroup::do_allgather(at::Tensor& output, const at::Tensor& input) {
  return issue(describe_call(CollectiveKind::kAllgather, input), [this, output, input] {
    // Gloo's allgather writes into a list of tensors: views of `output`, one per rank.
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (const auto& chunk : output.view({-1}).chunk(size())) {
      outputs[0].push_back(bits_as_half(chunk.view(input.sizes())));
    }
    std::vector<at::Tensor> inputs{bits_as_half(input)};
    return wrap(pg_->allgather(outputs, inputs), "allgather");
  });
}

std::shared_ptr<Work> GlooGroup::do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                                   const ReduceScatterOptions& opts) {
  return issue(describe_call(CollectiveKind::kReduceScatter, input, static_cast<int>(opts.op)),
               [this, output, input, op = opts.op]() -> std::shared_ptr<Work> {
    // ProcessGroupGloo has no reduce_scatter: all-reduce a copy of the input and keep our
    // slice. Twice the traffic of a real reduce-scatter; shm is the fast path on one host.
    auto full = input.clone();
    launch_allreduce(full, op)->wait();
    const auto n = output.numel();
    output.view({-1}).copy_(full.view({-1}).narrow(0, rank() * n, n));
    auto done = std::make_shared<CompletionWork>(options().timeout, where());
    done->complete();
    return done;
  });
}

std::shared_ptr<Work> GlooGroup::do_barrier() {
  return issue(describe_call(CollectiveKind::kBarrier, at::Tensor()),
               [this] { return wrap(pg_->barrier(), "barrier"); });
}

std::shared_ptr<ProcessGroup> make_gloo_group(const BackendArgs& args) {
  return std::make_shared<GlooGroup>(args);
}

}  // namespace dpx::detail
