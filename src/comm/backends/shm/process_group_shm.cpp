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
constexpr std::chrono::microseconds kGrace{50};
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
  if (!finished() && spin_.count() > 0) {
    const auto end = shm::Clock::now() + std::min<shm::Clock::duration>(spin_, timeout);
    while (!finished() && shm::Clock::now() < end) {
      ::sched_yield();  // the group's thread may need this core to finish the work
    }
  }
  if (!finished() && !sleep_until_finished(timeout)) {
    // A caller that gives up at the group timeout tells the group at once, as the thread running
    // the collective would at its own deadline a moment later: a peer that arrives in between
    // must fail, not complete the collective with a rank that has left it.
    const std::string message = timeout_message(*where_, timeout);
    if (timeout >= default_timeout_) {
      if (auto group = group_.lock()) group->abort_timed_out(message);
    }
    throw TimeoutError(message);
  }
  if (error_) std::rethrow_exception(error_);
}

bool ShmWork::sleep_until_finished(std::chrono::milliseconds timeout) {
  // Pairs with finish(): it stores finished_ and then reads sleepers_, we count ourselves and
  // then read finished_ (all sequentially consistent), so one of us sees the other; and the
  // futex sleeps only while finished_ still reads 0.
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  const auto end = shm::Clock::now() + timeout;
  bool done = false;
  for (;;) {
    done = finished_.load(std::memory_order_seq_cst) != 0;
    const auto left = end - shm::Clock::now();
    if (done || left <= shm::Clock::duration::zero()) break;
    shm::futex_wait_private(finished_, 0, left);
  }
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  return done;
}

void ShmWork::finish(std::exception_ptr error) {
  error_ = std::move(error);
  if (timed_) finished_at_ = std::chrono::steady_clock::now();
  finished_.store(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) shm::futex_wake_private(finished_);
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
  where_shared_ = std::make_shared<const std::string>(where());
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

std::shared_ptr<Work> ShmGroup::enqueue(Task task) {
  const bool timed = task.a.defined() && task.a.numel() * task.a.element_size() > kTimedBytes;
  task.work = std::make_shared<ShmWork>(weak_from_this(), options().timeout, where_shared_,
                                        spin_, timed);
  auto work = task.work;
  bool notify = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task.polls = polls_;
    issued_since_poll_ = true;
    queue_.push_back(std::move(task));
    queued_.store(queue_.size(), std::memory_order_seq_cst);
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
          if (cv_.wait_for(lock, kHelpPoll) == std::cv_status::timeout) {
            ++polls_;
            // An idle group stops polling; the next collective issued wakes this thread again.
            idle_polls = issued_since_poll_ ? 0 : idle_polls + 1;
            issued_since_poll_ = false;
            if (idle_polls >= kIdlePolls) callers_help_ = false;
            // One issued since the last poll most likely has its caller on the way to claim
            // it: give that caller kGrace before taking it (Note [Helping]).
            if (ready() && !stop_ && queue_.front().polls + 1 == polls_) {
              cv_.wait_for(lock, kGrace);
            }
          }
        } else {
          cv_.wait(lock);
        }
      }
      if (queue_.empty()) return;  // stopped, and nothing left to run
      executing_.store(true, std::memory_order_relaxed);
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.store(queue_.size(), std::memory_order_relaxed);
      // A collective issued before the poll that found it had no caller waiting for it:
      // collectives are being run asynchronously, so wake this thread for each from now on.
      if (task.polls != polls_) callers_help_ = false;
    }
    execute(task);
    release();
  }
}

bool ShmGroup::claim(Task& task) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (executing_.load(std::memory_order_relaxed) || queue_.empty()) return false;
  executing_.store(true, std::memory_order_relaxed);
  callers_help_ = true;
  task = std::move(queue_.front());
  queue_.pop_front();
  queued_.store(queue_.size(), std::memory_order_relaxed);
  return true;
}

void ShmGroup::release() {
  // No lock when nothing is queued: a collective issued after the load below takes the lock
  // and sees executing_ false (the group's thread, woken or polling, runs it); one issued
  // before is counted in queued_, and then the lock orders our notify after the thread's check.
  executing_.store(false, std::memory_order_seq_cst);
  if (queued_.load(std::memory_order_seq_cst) == 0 && !stop_.load(std::memory_order_seq_cst)) {
    return;
  }
  { std::lock_guard<std::mutex> lock(mutex_); }
  cv_.notify_all();  // wake the group's thread only when it has something to do
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
    channel_->begin(task.desc, options().timeout);
    run_body(task);
    task.a = at::Tensor();  // drop the tensors before waking the caller
    task.b = at::Tensor();
    task.shared.reset();
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
  char* mine = segment->slot(rank(), 0);
  shared_.add(segment, mine, segment->slot_bytes());
  return at::from_blob(mine, {static_cast<std::int64_t>(bytes)},
                       [segment](void*) mutable { segment.reset(); },
                       at::kByte);
}

void ShmGroup::run_body(Task& task) {
  shm::Channel& ch = *channel_;
  switch (task.desc.kind) {
    case CollectiveKind::kAllreduce:
      if (task.shared) {
        shm::allreduce_shared(ch, *task.shared, task.offset, task.a, task.op);
      } else {
        shm::allreduce(ch, task.a, task.op, algorithm_options_);
      }
      return;
    case CollectiveKind::kBroadcast: return shm::broadcast(ch, task.a, task.root);
    case CollectiveKind::kAllgather: return shm::allgather(ch, task.a, task.b);
    case CollectiveKind::kReduceScatter: return shm::reduce_scatter(ch, task.a, task.b, task.op);
    case CollectiveKind::kBarrier: return shm::barrier(ch);
  }
  TORCH_INTERNAL_ASSERT(false, "shm: a task of unknown kind ", static_cast<int>(task.desc.kind));
}

std::shared_ptr<Work> ShmGroup::do_allreduce(at::Tensor& tensor, const AllreduceOptions& opts) {
  Task task;
  task.desc = describe_call(CollectiveKind::kAllreduce, tensor, static_cast<int>(opts.op));
  task.a = tensor;
  task.op = opts.op;
  const bool large = tensor.numel() * tensor.element_size() > algorithm_options_.small_bytes;
  if (auto found = large ? shared_.find(tensor) : SharedBlocks<shm::Segment>::Found{};
      found.block) {  // Note [Shared buckets]
    task.shared = std::move(found.block);
    task.offset = found.offset;
    task.desc.shared = found.number;
    task.desc.root = static_cast<std::int32_t>(found.offset / 64);
  }
  return enqueue(std::move(task));
}

std::shared_ptr<Work> ShmGroup::do_broadcast(at::Tensor& tensor, const BroadcastOptions& opts) {
  Task task;
  task.desc = describe_call(CollectiveKind::kBroadcast, tensor, 0, opts.root);
  task.a = tensor;
  task.root = opts.root;
  return enqueue(std::move(task));
}

std::shared_ptr<Work> ShmGroup::do_allgather(at::Tensor& output, const at::Tensor& input) {
  Task task;
  task.desc = describe_call(CollectiveKind::kAllgather, input);
  task.a = output;
  task.b = input;
  return enqueue(std::move(task));
}

std::shared_ptr<Work> ShmGroup::do_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                                  const ReduceScatterOptions& opts) {
  Task task;
  task.desc = describe_call(CollectiveKind::kReduceScatter, input, static_cast<int>(opts.op));
  task.a = output;
  task.b = input;
  task.op = opts.op;
  return enqueue(std::move(task));
}

std::shared_ptr<Work> ShmGroup::do_barrier() {
  Task task;
  task.desc = describe_call(CollectiveKind::kBarrier, at::Tensor());
  return enqueue(std::move(task));
}

std::shared_ptr<ProcessGroup> make_shm_group(const BackendArgs& args) {
  return std::make_shared<ShmGroup>(args);  // works reach it through weak_from_this()
}

}  // namespace dpx::detail
