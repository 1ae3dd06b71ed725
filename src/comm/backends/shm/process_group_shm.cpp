#include "comm/backends/shm/process_group_shm.h"

#include <c10/util/Exception.h>

#include <sched.h>

#include <algorithm>
#include <limits>
#include <thread>

#include "comm/coordination/consistency.h"
#include "dpx/errors.h"
#include "runtime/env_read.h"
#include "runtime/memory/cpu_block_cache.h"

namespace dpx::detail {
namespace {

constexpr std::chrono::milliseconds kHelpPoll{1};
constexpr int kIdlePolls = 50;

// The shm backend's own variables (Note [Environment] in dpx/runtime/env.h), read when a group
// is made.
struct ShmEnv {
  std::optional<std::int64_t> slot_bytes = detail::env_int("DPX_SHM_SLOT_BYTES", 4096);
  std::optional<std::int64_t> small_bytes = detail::env_int("DPX_SHM_SMALL_BYTES", 0);
  std::optional<std::int64_t> spin_us = detail::env_int("DPX_SHM_SPIN_US", 0);
  std::optional<std::int64_t> shared_buckets = detail::env_int("DPX_SHM_SHARED_BUCKETS", 0);
};

shm::SegmentOptions segment_options(const ShmEnv& env, const ProcessGroup::Options& o) {
  shm::SegmentOptions s;
  if (env.slot_bytes) s.slot_bytes = static_cast<std::size_t>(*env.slot_bytes);
  s.timeout = o.timeout;
  return s;
}

shm::WaitOptions wait_options(const ShmEnv& env, int world) {
  shm::WaitOptions w;
  // With more ranks than cores, spin less: the spin yields, but a peer may need the core.
  if (world > static_cast<int>(std::thread::hardware_concurrency())) {
    w.spin = std::chrono::microseconds(20);
  }
  if (env.spin_us) w.spin = std::chrono::microseconds(*env.spin_us);
  return w;
}

}  // namespace

void ShmWork::wait(std::chrono::milliseconds timeout) {
  if (!finished() && timeout >= default_timeout_) {
    if (auto group = group_.lock()) group->help(*this);
  }
  const auto end = shm::Clock::now() + std::min<shm::Clock::duration>(spin_, timeout);
  while (!finished_.load(std::memory_order_acquire) && shm::Clock::now() < end) {
    ::sched_yield();  // the group's thread may need this core to finish the work
  }
  try {
    CompletionWork::wait(timeout);
  } catch (const TimeoutError& e) {
    // A caller that gives up at the group timeout tells the group at once, as the thread running
    // the collective would at its own deadline a moment later: a peer that arrives in between
    // must fail, not complete the collective with a rank that has left it.
    if (timeout >= default_timeout_) {
      if (auto group = group_.lock()) group->abort_timed_out(e.what());
    }
    throw;
  }
}

void ShmWork::finish(std::exception_ptr error) {
  complete(error);
  finished_.store(true, std::memory_order_release);
}

ShmGroup::ShmGroup(const BackendArgs& args)
    : ProcessGroup(args.rank, args.size, args.options), store_(args.store) {
  TORCH_CHECK(args.options.device.is_cpu(), where(), "the shm backend works on CPU tensors "
              "only, not ", args.options.device);
  const ShmEnv env;
  const shm::SegmentOptions segment = segment_options(env, options());
  if (env.small_bytes) algorithm_options_.small_bytes = static_cast<std::size_t>(*env.small_bytes);
  if (env.shared_buckets) shared_buckets_ = *env.shared_buckets != 0;
  // Both shape how ranks exchange data: a difference gives wrong results (Note [Consistency]).
  check_settings_agree(*args.store, rank(), size(),
                       {{"backend", "shm"},
                        {"DPX_SHM_SLOT_BYTES", std::to_string(segment.slot_bytes)},
                        {"DPX_SHM_SMALL_BYTES", std::to_string(algorithm_options_.small_bytes)},
                        {"DPX_SHM_SHARED_BUCKETS", shared_buckets_ ? "1" : "0"}},
                       options().timeout, where());
  segment_ = shm::Segment::open(*args.store, rank(), size(), segment, where());
  const shm::WaitOptions wait = wait_options(env, size());
  spin_ = wait.spin;
  waiter_ = std::make_unique<shm::Waiter>(*segment_, rank(), wait, where());
  channel_ = std::make_unique<shm::Channel>(*segment_, *waiter_, rank(), where());
  thread_ = std::thread([this] { run(); });
}

ShmGroup::~ShmGroup() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Work> ShmGroup::enqueue(const CollectiveDescriptor& desc,
                                        std::function<void(shm::Channel&)> body) {
  Task task;
  task.desc = desc;
  task.body = std::move(body);
  task.enqueued = shm::Clock::now();
  task.work = std::make_shared<ShmWork>(weak_from_this(), options().timeout, where(), spin_);
  auto work = task.work;
  bool notify = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
    notify = !callers_help_;
  }
  if (notify) cv_.notify_one();
  return work;
}

void ShmGroup::run() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto ready = [&] { return !executing_ && (stop_ || !queue_.empty()); };
      // While callers help, enqueue does not wake this thread; polling bounds how long a
      // collective nobody waits for can sit in the queue (Note [Helping]).
      int idle_polls = 0;
      while (!ready()) {
        if (callers_help_) {
          cv_.wait_for(lock, kHelpPoll);
          // An idle group stops polling; the next collective issued wakes this thread again.
          if (queue_.empty() && ++idle_polls >= kIdlePolls) callers_help_ = false;
        } else {
          cv_.wait(lock);
        }
      }
      if (queue_.empty()) return;  // stopped, and nothing left to run
      executing_ = true;
      task = std::move(queue_.front());
      queue_.pop_front();
      // A collective that sat in the queue until a poll found it had no caller waiting for it:
      // collectives are being run asynchronously, so wake this thread for each from now on.
      if (shm::Clock::now() - task.enqueued > kHelpPoll / 2) callers_help_ = false;
    }
    execute(task);
    release();
  }
}

bool ShmGroup::claim(Task& task) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (executing_ || queue_.empty()) return false;
  executing_ = true;
  callers_help_ = true;
  task = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void ShmGroup::release() {
  bool more = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    executing_ = false;
    more = stop_ || !queue_.empty();
  }
  if (more) cv_.notify_all();  // wake the group's thread only when it has something to do
}

void ShmGroup::abort_timed_out(const std::string& message) {
  waiter_->abort(shm::AbortKind::kTimeout, message);
}

void ShmGroup::abort(shm::AbortKind kind, const std::string& message) {
  waiter_->abort(kind, message);
}

void ShmGroup::help(const ShmWork& work) {
  Task task;
  while (!work.finished() && claim(task)) {
    execute(task);
    task = Task();
    release();
  }
}

void ShmGroup::execute(Task& task) {
  if (broken_) {
    task.work->finish(broken_);
    return;
  }
  try {
    channel_->begin(task.desc, shm::Clock::now() + options().timeout);
    task.body(*channel_);
    task.body = nullptr;  // drop the tensors before waking the caller
    task.work->finish();
  } catch (const MismatchError&) {
    task.work->finish(std::current_exception());  // every rank raised it; still in step
  } catch (const std::exception& e) {
    // Timeouts and lost peers were already announced to the peers by the waiter.
    waiter_->abort(shm::AbortKind::kOther, e.what());
    broken_ = std::current_exception();
    task.work->finish(broken_);
  }
}

at::Tensor ShmGroup::allocate_shared(std::size_t bytes) {
  if (!shared_buckets_ || size() == 1) return {};
  shm::SegmentOptions o;
  o.slot_bytes = std::max<std::size_t>(bytes, 1);
  o.slots_per_rank = 1;
  o.round = "shm-shared";
  o.purpose = "DDP keeps its buckets there: world x the model's gradient bytes. Free memory or "
              "raise the memory limit, or set DPX_SHM_SHARED_BUCKETS=0 on every rank to keep "
              "them private (slower).";
  o.timeout = options().timeout;
  std::shared_ptr<shm::Segment> segment = shm::Segment::open(*store_, rank(), size(), o, where());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shared_.erase(std::remove_if(shared_.begin(), shared_.end(),
                                 [](const auto& s) { return s.expired(); }),
                  shared_.end());
    shared_.push_back(segment);
  }
  char* mine = segment->slot(rank(), 0);
  return at::from_blob(mine, {static_cast<std::int64_t>(bytes)},
                       [segment](void*) mutable { segment.reset(); },
                       at::kByte);
}

std::shared_ptr<shm::Segment> ShmGroup::find_shared(const at::Tensor& tensor,
                                                    std::size_t& offset) {
  if (!tensor.is_contiguous() || tensor.numel() == 0) return nullptr;
  const auto* begin = static_cast<const char*>(tensor.data_ptr());
  const auto* end = begin + tensor.numel() * tensor.element_size();
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& weak : shared_) {
    auto segment = weak.lock();
    if (!segment) continue;
    const char* part = segment->slot(rank(), 0);
    if (begin >= part && end <= part + segment->slot_bytes()) {
      offset = static_cast<std::size_t>(begin - part);
      const bool fits = offset % 64 == 0 && offset / 64 <= std::numeric_limits<std::int32_t>::max();
      return fits ? segment : nullptr;
    }
  }
  return nullptr;
}

std::shared_ptr<Work> ShmGroup::do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) {
  at::Tensor t = tensor;
  auto desc = describe_call(CollectiveKind::kAllreduce, t, static_cast<int>(opts.op));
  std::size_t offset = 0;
  const bool large = t.numel() * t.element_size() > algorithm_options_.small_bytes;
  if (auto segment = large ? find_shared(t, offset) : nullptr) {
    desc.shared = 1;
    desc.root = static_cast<std::int32_t>(offset / 64);
    return enqueue(desc, [t, op = opts.op, segment, offset](shm::Channel& ch) mutable {
      shm::allreduce_shared(ch, *segment, offset, t, op);
    });
  }
  auto small = algorithm_options_;
  return enqueue(desc,
                 [t, op = opts.op, small](shm::Channel& ch) mutable {
                   shm::allreduce(ch, t, op, small);
                 });
}

std::shared_ptr<Work> ShmGroup::do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) {
  at::Tensor t = tensor;
  return enqueue(describe_call(CollectiveKind::kBroadcast, t, 0, opts.root),
                 [t, root = opts.root](shm::Channel& ch) mutable { shm::broadcast(ch, t, root); });
}

std::shared_ptr<Work> ShmGroup::do_allgather(at::Tensor& output, const at::Tensor& input) {
  return enqueue(describe_call(CollectiveKind::kAllgather, input),
                 [out = output, in = input](shm::Channel& ch) mutable {
                   shm::allgather(ch, out, in);
                 });
}

std::shared_ptr<Work> ShmGroup::do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                                  const ReduceScatterOptions& opts) {
  return enqueue(describe_call(CollectiveKind::kReduceScatter, input, static_cast<int>(opts.op)),
                 [out = output, in = input, op = opts.op](shm::Channel& ch) mutable {
                   shm::reduce_scatter(ch, out, in, op);
                 });
}

std::shared_ptr<Work> ShmGroup::do_barrier() {
  return enqueue(describe_call(CollectiveKind::kBarrier, at::Tensor()),
                 [](shm::Channel& ch) { shm::barrier(ch); });
}

std::shared_ptr<ProcessGroup> make_shm_group(const BackendArgs& args) {
  return std::make_shared<ShmGroup>(args);  // works reach it through weak_from_this()
}

}  // namespace dpx::detail
